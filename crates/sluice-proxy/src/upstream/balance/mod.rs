//! Balancers: one file per algorithm, each a [`Kind`] registered with one line in
//! `balancers!` below. A balancer only chooses among the nodes it is handed ([`NodeSet`]: in
//! rotation, not yet tried by this request, of the best priority available); health,
//! priorities and retries are decided once, in [`super::select`], for every algorithm
//! (APISIX's balancers expose the same two calls: `get(ctx)` and `after_balance(ctx,
//! before_retry)`).

use sluice_config::{UpstreamConfig, Validator};

mod pick;
pub(crate) mod ring;
mod set;

pub(crate) use pick::{Algorithm, Balance, Kind, PickCx};
pub(crate) use set::NodeSet;

use super::node::Node;

/// The algorithms, one line each: declares the module and registers its `KIND`, in the order
/// errors list them.
macro_rules! balancers {
    ($($module:ident),* $(,)?) => {
        $(mod $module;)*

        /// Every balancing algorithm.
        pub(crate) static KINDS: &[&dyn Kind] = &[$(&$module::KIND),*];
    };
}

balancers! {
    roundrobin,
    chash,
    least_conn,
    ewma,
}

/// Compiles the upstream's `type` for its nodes (`v` points at the upstream).
pub(crate) fn build(
    u: &UpstreamConfig,
    nodes: &[Node],
    v: &mut Validator,
) -> Option<Box<dyn Algorithm>> {
    let Some(kind) = KINDS.iter().find(|k| k.name() == u.balancer) else {
        let names: Vec<&str> = KINDS.iter().map(|k| k.name()).collect();
        let (last, rest) = names.split_last().expect("a balancer");
        v.error_at(
            "type",
            format!(
                "unsupported balancer \"{}\", expected {} or {last}",
                u.balancer,
                rest.join(", ")
            ),
        );
        return None;
    };
    let algorithm = kind.build(u, nodes, v)?;
    if algorithm.hash_on().is_none() {
        let mut ok = true;
        for (field, set) in [("hash_on", u.hash_on.is_some()), ("key", u.key.is_some())] {
            if set {
                v.error_at(field, "is only used with type: chash");
                ok = false;
            }
        }
        if !ok {
            return None;
        }
    }
    Some(algorithm)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(yaml: &str) -> Vec<String> {
        let u: UpstreamConfig =
            serde_json::from_value(sluice_config::parse_text(yaml).expect("yaml"))
                .expect("an upstream");
        let mut v = Validator::new();
        let built = build(&u, &[], &mut v);
        let errors: Vec<String> = v.into_errors().iter().map(ToString::to_string).collect();
        assert_eq!(built.is_some(), errors.is_empty(), "{errors:?}");
        errors
    }

    #[test]
    fn each_algorithm_is_found_by_its_name_and_checks_its_own_fields() {
        let mut names: Vec<&str> = KINDS.iter().map(|k| k.name()).collect();
        for name in &names {
            assert_eq!(errors(&format!("{{type: {name}}}")), Vec::<String>::new());
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), KINDS.len(), "two balancers share a name");
        assert_eq!(
            errors("{type: random}"),
            [
                "type: unsupported balancer \"random\", expected roundrobin, chash, least_conn or ewma"
            ]
        );
        // What only a hashing algorithm reads is refused elsewhere.
        assert_eq!(
            errors("{type: least_conn, hash_on: header, key: x}"),
            [
                "hash_on: is only used with type: chash",
                "key: is only used with type: chash"
            ]
        );
        assert_eq!(
            errors("{type: chash, hash_on: cookie}"),
            ["key: is required with hash_on: cookie"]
        );
        assert_eq!(
            errors("{type: chash, hash_on: vars, key: http_x_user}"),
            Vec::<String>::new()
        );
    }
}
