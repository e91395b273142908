//! A request's plugin phases before the proxy (rewrite, access with the identified
//! consumer's own plugins, before_proxy), and the chains they walk.

use sluice_core::http::RequestHead;
use sluice_core::plugin::{ChainEntry, run_access, run_rewrite};
use sluice_core::{Chain, Ctx, Flow, Response};

use crate::snapshot::Snapshot;
use crate::worker::Worker;

/// The plugin side of a request: its chains and context. `None` for routes without plugins,
/// which take the engine's path untouched.
pub(crate) type Plugged<'a, 's> = Option<(Chains<'a>, &'a mut Ctx<'s>)>;

/// A request's plugins: its route's chain (or the global rules') and every consumer's, of
/// which the identified consumer's joins from the access phase on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Chains<'a> {
    pub(crate) route: &'a Chain,
    /// By consumer index (the snapshot's).
    pub(crate) consumers: &'a [Chain],
}

impl<'a> Chains<'a> {
    /// `route`'s chain (the global rules' without one) with the snapshot's consumers.
    pub(crate) fn of(route: &'a Chain, snap: &'a Snapshot) -> Chains<'a> {
        Chains {
            route,
            consumers: &snap.consumer_chains,
        }
    }

    /// The plugins of the consumer an auth plugin identified, if any.
    pub(crate) fn consumer(&self, cx: &Ctx<'_>) -> Option<&'a Chain> {
        cx.consumer_index()
            .and_then(|i| self.consumers.get(i as usize))
    }
}

/// The entries of one phase: the route's, merged with the identified consumer's (whose
/// configuration of a plugin wins), in priority order.
/// Runs the phases before the proxy: rewrite, access (with the consumer's plugins merged in once
/// an auth plugin identified one) and before_proxy. `Err`: a plugin answered the request (after
/// waiting, for a delayed answer).
pub(crate) async fn request_phases(
    chains: Chains<'_>,
    head: &mut RequestHead,
    cx: &mut Ctx<'_>,
    w: &Worker,
) -> Result<(), Response> {
    let r = phases(chains, head, cx).await;
    // A refusal is a 4xx or 5xx: a plugin's own 2xx or 3xx (a CORS preflight, a mock, a
    // redirect) is an answer, not a rejection.
    if let Err((plugin, resp)) = &r
        && resp.status >= 400
        && w.metrics.enabled()
    {
        w.metrics.rejected(plugin, resp.status);
    }
    r.map_err(|(_, resp)| resp)
}

/// The phases; `Err`: the plugin that answered, and its answer.
pub(crate) async fn phases(
    chains: Chains<'_>,
    head: &mut RequestHead,
    cx: &mut Ctx<'_>,
) -> Result<(), (&'static str, Response)> {
    async fn step(flow: Flow) -> Result<(), Response> {
        match flow {
            Flow::Continue => Ok(()),
            Flow::Sleep(d) => {
                tokio::time::sleep(d).await;
                Ok(())
            }
            Flow::Delayed(d, r) => {
                tokio::time::sleep(d).await;
                Err(*r)
            }
            Flow::Respond(r) => Err(r),
        }
    }
    let chain = chains.route;
    for e in chain.rewrite.iter() {
        step(run_rewrite(&*e.plugin, head, cx).await)
            .await
            .map_err(|r| (e.name, r))?;
    }
    // APISIX's rewrite_in_consumer: once an auth plugin identified the consumer, the rewrite
    // phase of the consumer's own plugins (proxy-rewrite on a consumer, say).
    if let Some(c) = chains.consumer(cx) {
        for e in c.rewrite.iter() {
            step(run_rewrite(&*e.plugin, head, cx).await)
                .await
                .map_err(|r| (e.name, r))?;
        }
    }
    let consumer = chains.consumer(cx);
    for e in phase(chain, consumer, |c| &c.access) {
        if cx.skips(e.name) {
            continue;
        }
        step(run_access(&*e.plugin, head, cx).await)
            .await
            .map_err(|r| (e.name, r))?;
    }
    for e in phase(chain, consumer, |c| &c.before_proxy) {
        step(e.plugin.before_proxy(head, cx))
            .await
            .map_err(|r| (e.name, r))?;
    }
    Ok(())
}

pub(crate) fn phase<'a>(
    chain: &'a Chain,
    consumer: Option<&'a Chain>,
    pick: fn(&Chain) -> &[ChainEntry],
) -> impl Iterator<Item = &'a ChainEntry> + 'a {
    let (theirs, all): (&[ChainEntry], &[ChainEntry]) = match consumer {
        Some(c) => (pick(c), &c.all),
        None => (&[], &[]),
    };
    sluice_core::plugin::merged(pick(chain), theirs, all)
}
