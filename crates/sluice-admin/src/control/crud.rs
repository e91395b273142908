//! The admin API's calls on resources: list, get, put, create, patch, delete. Owns: the
//! write path of one item (validated, compiled, persisted to the file or etcd, then
//! installed; put back as it was on any failure).

use std::sync::atomic::Ordering;

use serde_json::Value;
use sluice_config::ConfigErrors;

use super::doc::{Doc, Item, hash, id_text, merge};
use super::refs::users_of;
use super::{AdminError, Control, Kind, Ready};
use crate::etcd::Written;

/// What an admin write does to an item.
enum Edit {
    /// Create or replace it.
    Set(Value),
    /// Create it; a conflict if it exists.
    Create(Value),
    /// Merge into it (PATCH).
    Merge(Value),
    /// Remove it.
    Delete,
}

impl Control {
    /// Every item of a kind.
    pub fn list(&self, kind: Kind) -> Vec<Value> {
        let state = self.state.lock();
        state
            .doc
            .list(kind)
            .map(|l| l.values().map(Item::value).collect())
            .unwrap_or_default()
    }

    /// Every item of a kind, each with its etcd revision (0 when not in etcd).
    pub fn list_with_rev(&self, kind: Kind) -> Vec<(Value, i64)> {
        let state = self.state.lock();
        state
            .doc
            .list(kind)
            .map(|l| l.values().map(|i| (i.value(), i.rev)).collect())
            .unwrap_or_default()
    }

    /// One item, with its etcd revision (0 when not in etcd).
    pub fn get_with_rev(&self, kind: Kind, id: &str) -> Option<(Value, i64)> {
        let state = self.state.lock();
        state.doc.list(kind)?.get(id).map(|i| (i.value(), i.rev))
    }

    /// The JSON schema of a plugin's configuration (`consumer`: of its credentials).
    pub fn plugin_schema(&self, name: &str, consumer: bool) -> Option<serde_json::Value> {
        self.catalog.plugin_schema(name, consumer)
    }

    /// The names of the plugins configurations may use.
    pub fn plugin_names(&self) -> Vec<&'static str> {
        self.catalog.plugin_names()
    }

    /// One item.
    pub fn get(&self, kind: Kind, id: &str) -> Option<Value> {
        let state = self.state.lock();
        state.doc.list(kind)?.get(id).map(Item::value)
    }

    /// Creates or replaces an item. Returns the item and whether it was created.
    pub fn put(&self, kind: Kind, id: &str, mut value: Value) -> Result<(Value, bool), AdminError> {
        let obj = value
            .as_object_mut()
            .ok_or_else(|| AdminError::BadRequest("the body must be a JSON object".into()))?;
        match obj.get(kind.id_field()) {
            Some(v) if id_text(v).as_deref() != Some(id) => {
                return Err(AdminError::BadRequest(format!(
                    "{} in the body ({v}) differs from the one in the URL ({id})",
                    kind.id_field()
                )));
            }
            _ => {
                obj.insert(kind.id_field().into(), Value::String(id.into()));
            }
        }
        self.change(kind, id, Edit::Set(value))
            .map(|(created, value)| (value.unwrap_or_default(), created))
    }

    /// Creates an item with a generated id.
    pub fn create(&self, kind: Kind, mut value: Value) -> Result<Value, AdminError> {
        let obj = value
            .as_object_mut()
            .ok_or_else(|| AdminError::BadRequest("the body must be a JSON object".into()))?;
        let id = match obj.get(kind.id_field()).and_then(id_text) {
            Some(id) if kind == Kind::Consumers => id,
            Some(_) => {
                return Err(AdminError::BadRequest(
                    "POST generates the id; use PUT to choose one".into(),
                ));
            }
            None if kind == Kind::Consumers => {
                return Err(AdminError::BadRequest("username is required".into()));
            }
            None => format!("{:016x}", fastrand::u64(..)),
        };
        if let Some(obj) = value.as_object_mut() {
            obj.insert(kind.id_field().into(), Value::String(id.clone()));
        }
        // Checked under the write's lock: two creations of the same id cannot both succeed.
        self.change(kind, &id, Edit::Create(value))
            .map(|(_, v)| v.unwrap_or_default())
    }

    /// Merges `patch` into an item (RFC 7396 JSON merge patch).
    pub fn patch(&self, kind: Kind, id: &str, patch: Value) -> Result<Value, AdminError> {
        let Some(obj) = patch.as_object() else {
            return Err(AdminError::BadRequest(
                "the body must be a JSON object".into(),
            ));
        };
        if let Some(v) = obj.get(kind.id_field())
            && id_text(v).as_deref() != Some(id)
        {
            return Err(AdminError::BadRequest(format!(
                "{} in the body ({v}) differs from the one in the URL ({id})",
                kind.id_field()
            )));
        }
        // Merged under the same lock as the write: a change applied from etcd in between
        // cannot be lost (the merge base and the guard revision are read together).
        self.change(kind, id, Edit::Merge(patch))
            .map(|(_, value)| value.unwrap_or_default())
    }

    /// Deletes an item; refuses (409) when other resources refer to it.
    pub fn delete(&self, kind: Kind, id: &str) -> Result<(), AdminError> {
        self.change(kind, id, Edit::Delete).map(|_| ())
    }

    /// Sets (`Some`) or deletes (`None`) item `id` of `kind`, then validates, compiles,
    /// persists and installs the result, in that order; the running configuration changes only
    /// when every step succeeded. A route changes alone (its validation and compilation do not
    /// depend on how many routes there are); anything else recompiles the whole configuration.
    /// Returns whether the item was created, and the item as written.
    fn change(
        &self,
        kind: Kind,
        id: &str,
        edit: Edit,
    ) -> Result<(bool, Option<Value>), AdminError> {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        self.catch_up_with_file(state)?;
        let position = state.doc.list(kind).and_then(|l| l.get_index_of(id));
        let value = match edit {
            Edit::Create(_) if position.is_some() => {
                return Err(AdminError::Conflict(format!(
                    "{} \"{id}\" already exists",
                    kind.name()
                )));
            }
            Edit::Set(v) | Edit::Create(v) => Some(v),
            Edit::Delete => None,
            Edit::Merge(patch) => {
                let mut current = state
                    .doc
                    .list(kind)
                    .and_then(|l| l.get(id))
                    .map(Item::value)
                    .ok_or_else(|| AdminError::NotFound(format!("{} \"{id}\"", kind.name())))?;
                merge(&mut current, patch);
                if let Some(obj) = current.as_object_mut() {
                    obj.insert(kind.id_field().into(), Value::String(id.into()));
                }
                Some(current)
            }
        };
        if value.is_none() {
            if position.is_none() {
                return Err(AdminError::NotFound(format!("{} \"{id}\"", kind.name())));
            }
            if let Some(users) = users_of(&state.doc, kind, id) {
                return Err(AdminError::Conflict(format!(
                    "{} \"{id}\" is in use by {users}",
                    kind.name()
                )));
            }
        }
        // The document is edited in place (copying 100,000 routes per change would cost more
        // than the change) and put back as it was if anything fails.
        let list = state.doc.list_mut(kind);
        let (index, old) = match (&value, position) {
            (Some(v), Some(i)) => (i, Some(std::mem::replace(&mut list[i], Item::new(v)))),
            (Some(v), None) => {
                list.insert(id.to_owned(), Item::new(v));
                (list.len() - 1, None)
            }
            (None, Some(i)) => (i, list.shift_remove_index(i).map(|(_, item)| item)),
            (None, None) => unreachable!("checked above"),
        };
        let undo = |doc: &mut Doc| {
            let list = doc.list_mut(kind);
            match (old.clone(), value.is_some()) {
                (Some(item), true) => list[index] = item,
                (None, _) => {
                    list.shift_remove(id);
                }
                (Some(item), false) => {
                    list.shift_insert(index, id.to_owned(), item);
                }
            }
        };
        // Errors come back relative to the item written.
        let prefix = format!("{}[{index}]", kind.name());
        let relative = |errors: ConfigErrors| -> ConfigErrors {
            ConfigErrors(
                errors
                    .0
                    .into_iter()
                    .map(|mut e| {
                        if value.is_some()
                            && let Some(rest) = e.path.strip_prefix(&prefix)
                            && (rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
                        {
                            e.path = rest.trim_start_matches('.').to_owned();
                        }
                        e
                    })
                    .collect(),
            )
        };
        let ready = if kind == Kind::Routes && !state.doc.positional {
            self.prepare_routes(
                &state.routes_cx,
                vec![(index, id.to_owned(), value.clone())],
                None,
            )
        } else {
            self.prepare_full(state.doc.clone())
        };
        let ready = match ready {
            Ok(r) => r,
            Err(e) => {
                undo(&mut state.doc);
                let mut e = relative(e);
                // In the order of the body that was sent.
                if let Some(body) = &value {
                    e.sort_by_document(body);
                }
                self.admin_refused(&format!("{} {id}", kind.name()), &e);
                return Err(AdminError::Invalid(e));
            }
        };
        let mut ready = ready;
        if let Some(link) = &self.etcd {
            // Cluster mode: the write goes to etcd, guarded; this node applies it at once,
            // and every other node when its watch sees it.
            let bytes = value
                .as_ref()
                .map(|v| serde_json::to_vec(v).unwrap_or_default());
            match link.write(state.guard_rev, kind, id, bytes) {
                Ok(Written::At(rev)) => {
                    state.guard_rev = rev;
                    self.cluster.revision.fetch_max(rev, Ordering::Relaxed);
                    self.cluster.cache_dirty.store(true, Ordering::Relaxed);
                    let doc = match &mut ready {
                        Ready::Full { doc, .. } => doc,
                        Ready::Routes { .. } => &mut state.doc,
                    };
                    if let Some(item) = doc.list_mut(kind).get_mut(id) {
                        item.rev = rev;
                    }
                }
                Ok(Written::Conflict) => {
                    undo(&mut state.doc);
                    return Err(AdminError::Conflict(
                        "the configuration was changed by another writer since this node last saw it; nothing changed, retry".into(),
                    ));
                }
                Err(e) => {
                    undo(&mut state.doc);
                    return Err(AdminError::Unavailable(format!("{e}; nothing changed")));
                }
            }
        } else {
            let text = match &ready {
                Ready::Full { doc, .. } => doc.render(),
                Ready::Routes { .. } => state.doc.render(),
            };
            if let Err(e) = self.save_file(state, text) {
                undo(&mut state.doc);
                return Err(e);
            }
        }
        self.install(state, ready);
        Ok((position.is_none(), value))
    }

    /// File mode: writes the document's `text` to the configuration file, unless the file
    /// changed since it was last read (an editor's save would be lost); records what was
    /// written.
    fn save_file(
        &self,
        state: &mut super::State,
        text: Result<String, String>,
    ) -> Result<(), AdminError> {
        // The file must still be what it was when the write began (an editor may have
        // saved it while the write compiled): the write would replace that edit.
        if let Some(path) = self.store.watch_path()
            && crate::store::signature(path) != state.in_service_sig
        {
            return Err(AdminError::Conflict(format!(
                "the configuration file {} changed while this write was prepared; nothing changed, retry",
                self.store.describe()
            )));
        }
        // A file that ends with APISIX's #END marker keeps it.
        let end_marker = state.end_marker;
        let saved = text
            .map(|mut text| {
                if end_marker {
                    text.push_str("#END\n");
                }
                text
            })
            .map_err(|e| format!("cannot serialize: {e}"))
            .and_then(|text| self.store.save(&text).map(|()| hash(&text)));
        match saved {
            Ok(h) => {
                state.text_hash = h;
                state.held = None;
                self.publish_held(state);
                if let Some(path) = self.store.watch_path() {
                    let sig = crate::store::signature(path);
                    *self.saved.lock() = sig;
                    state.in_service_sig = sig;
                }
                Ok(())
            }
            Err(e) => Err(AdminError::Store(e)),
        }
    }

    /// Replaces every resource list named in `lists` (APISIX's `PUT /apisix/admin/configs`):
    /// checked and compiled whole, saved, then put in service; nothing changes on any error.
    /// File mode only: in cluster mode resources are written one by one.
    pub fn replace_lists(&self, lists: Vec<(Kind, Vec<Value>)>) -> Result<u64, AdminError> {
        if self.etcd.is_some() {
            return Err(AdminError::BadRequest(
                "a whole configuration is written to a node whose configuration is its file (APISIX's standalone mode); with etcd, write resources one by one".into(),
            ));
        }
        let mut guard = self.state.lock();
        let state = &mut *guard;
        self.catch_up_with_file(state)?;
        let mut map = state.doc.to_map();
        for (kind, items) in lists {
            map.insert(kind.name().into(), Value::Array(items));
        }
        // Checked as written first: the document keys items by id, so a duplicate id would
        // otherwise replace the first silently instead of being refused.
        self.check(map.clone()).map_err(|e| {
            self.admin_refused("configs", &e);
            AdminError::Invalid(e)
        })?;
        let next = Doc::from_map(map);
        let ready = match self.prepare_full(next.clone()) {
            Ok(r) => r,
            Err(e) => {
                self.admin_refused("configs", &e);
                return Err(AdminError::Invalid(e));
            }
        };
        self.save_file(state, next.render())?;
        Ok(self.install(state, ready))
    }
}
