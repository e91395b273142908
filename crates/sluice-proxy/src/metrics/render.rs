//! Scraping: every worker's shard summed, written in Prometheus' or OpenMetrics' text.

use super::*;

impl Metrics {
    /// Writes every data plane family, summed over the workers.
    pub(crate) fn render(&self, w: &mut Writer<'_>) {
        let shards: Vec<Arc<Shard>> = self.shards.lock().clone();

        w.family(
            "sluice_start_time_seconds",
            "gauge",
            "When the gateway started, in seconds since the Unix epoch.",
        );
        let started = self
            .started
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        w.sample("sluice_start_time_seconds", &[], started);
        // Requests by route, method and status class.
        let mut routes: BTreeMap<u32, RouteSum> = BTreeMap::new();
        let mut protocols = [0u64; 3];
        let mut inflight = 0i64;
        let mut conns = vec![([0i64; 2], [0i64; 2]); self.listeners.len()];
        let (mut tls_ok, mut tls_failed) = (0u64, 0u64);
        let mut ups: BTreeMap<u32, ([u64; 6], HistSum)> = BTreeMap::new();
        let mut streams: BTreeMap<(u32, &'static str), [i64; 4]> = BTreeMap::new();
        let mut rejections: BTreeMap<(&'static str, u16), u64> = BTreeMap::new();
        let mut llm: BTreeMap<(u32, u32), LlmSum> = BTreeMap::new();
        for s in &shards {
            for (key, l) in s.llm.lock().iter() {
                let e = llm.entry(*key).or_default();
                for (i, c) in l.requests.iter().enumerate() {
                    e.0[i] += c.get();
                }
                for (i, c) in l.tokens.iter().enumerate() {
                    e.1[i] += c.get();
                }
                e.2.add(&l.latency);
                e.3.add(&l.first_token);
            }
            for (slot, r) in s.routes.lock().iter() {
                let e = routes
                    .entry(*slot)
                    .or_insert_with(|| (vec![[0; 5]; 11], HistSum::default(), 0, 0));
                for (m, row) in r.requests.iter().enumerate() {
                    for (c, n) in row.iter().enumerate() {
                        e.0[m][c] += n.get();
                    }
                }
                e.1.add(&r.duration);
                e.2 += r.bytes_in.get();
                e.3 += r.bytes_out.get();
            }
            for (slot, u) in s.upstreams.lock().iter() {
                let e = ups.entry(*slot).or_default();
                for (i, n) in u.responses.iter().enumerate() {
                    e.0[i] += n.get();
                }
                e.1.add(&u.duration);
            }
            for (slot, st, proto) in s.streams.lock().iter() {
                let e = streams.entry((*slot, proto)).or_default();
                e[0] += st.sessions.get() as i64;
                e[1] += st.active.get();
                e[2] += st.bytes_in.get() as i64;
                e[3] += st.bytes_out.get() as i64;
            }
            for (p, status, c) in s.rejections.lock().iter() {
                *rejections.entry((*p, *status)).or_default() += c.get();
            }
            for (i, p) in s.protocols.iter().enumerate() {
                protocols[i] += p.get();
            }
            inflight += s.inflight.get();
            for (i, c) in s.conns.iter().enumerate() {
                for p in 0..2 {
                    conns[i].0[p] += c.open[p].get();
                    conns[i].1[p] += c.idle[p].get();
                }
            }
            tls_ok += s.tls_ok.get();
            tls_failed += s.tls_failed.get();
        }
        // Read after the series: a worker may intern a label and create its series meanwhile;
        // labels are only ever appended, so every slot seen above has its name here.
        let (route_names, route_folded) = self.routes.names();
        let (up_names, up_folded) = self.upstreams.names();
        let (stream_names, stream_folded) = self.streams.names();
        let (model_names, _) = self.models.names();
        fn name(names: &[Box<str>], slot: u32) -> &str {
            names.get(slot as usize).map_or("", |n| n)
        }

        w.family(
            "sluice_http_requests_total",
            "counter",
            "HTTP requests answered, by route, method and status class (route \"\": none matched).",
        );
        for (slot, (rows, _, _, _)) in &routes {
            let route = name(&route_names, *slot);
            for (m, row) in rows.iter().enumerate() {
                for (c, n) in row.iter().enumerate() {
                    if *n > 0 {
                        w.sample(
                            "sluice_http_requests_total",
                            &[
                                ("route", route),
                                ("method", METHODS[m]),
                                ("status", STATUSES[c]),
                            ],
                            n,
                        );
                    }
                }
            }
        }
        if !llm.is_empty() {
            w.family(
                "sluice_llm_requests_total",
                "counter",
                "Exchanges with language models (ai-proxy, ai-proxy-multi), by route, model and status class.",
            );
            for ((r, m), (statuses, _, _, _)) in &llm {
                let (route, model) = (name(&route_names, *r), name(&model_names, *m));
                for (c, n) in statuses.iter().enumerate() {
                    if *n > 0 {
                        w.sample(
                            "sluice_llm_requests_total",
                            &[("route", route), ("model", model), ("status", STATUSES[c])],
                            n,
                        );
                    }
                }
            }
            w.family(
                "sluice_llm_tokens_total",
                "counter",
                "Tokens used, by route, model and kind (prompt includes cached, completion includes reasoning, as OpenAI counts).",
            );
            for ((r, m), (_, tokens, _, _)) in &llm {
                let (route, model) = (name(&route_names, *r), name(&model_names, *m));
                for (k, n) in tokens.iter().enumerate() {
                    w.sample(
                        "sluice_llm_tokens_total",
                        &[("route", route), ("model", model), ("kind", TOKEN_KINDS[k])],
                        n,
                    );
                }
            }
            w.family(
                "sluice_llm_request_duration_seconds",
                "histogram",
                "Time from sending a request to the model to the end of its answer, by route and model.",
            );
            for ((r, m), (_, _, h, _)) in &llm {
                let labels = [
                    ("route", name(&route_names, *r)),
                    ("model", name(&model_names, *m)),
                ];
                histogram(w, "sluice_llm_request_duration_seconds", &labels, h);
            }
            w.family(
                "sluice_llm_time_to_first_token_seconds",
                "histogram",
                "Time from sending a request to the model to the first byte of its answer, by route and model.",
            );
            for ((r, m), (_, _, _, h)) in &llm {
                let labels = [
                    ("route", name(&route_names, *r)),
                    ("model", name(&model_names, *m)),
                ];
                histogram(w, "sluice_llm_time_to_first_token_seconds", &labels, h);
            }
        }
        w.family(
            "sluice_llm_active_streams",
            "gauge",
            "Streamed answers of language models being forwarded now.",
        );
        w.sample(
            "sluice_llm_active_streams",
            &[],
            sluice_core::llm::ACTIVE_STREAMS.load(std::sync::atomic::Ordering::Relaxed),
        );
        w.family(
            "sluice_http_request_duration_seconds",
            "histogram",
            "Time from a request's first byte to its last response byte, by route.",
        );
        for (slot, (_, h, _, _)) in &routes {
            let route = name(&route_names, *slot);
            histogram(
                w,
                "sluice_http_request_duration_seconds",
                &[("route", route)],
                h,
            );
        }
        w.family(
            "sluice_http_request_body_bytes_total",
            "counter",
            "Request body bytes received, by route.",
        );
        for (slot, (_, _, bin, _)) in &routes {
            let route = name(&route_names, *slot);
            w.sample(
                "sluice_http_request_body_bytes_total",
                &[("route", route)],
                bin,
            );
        }
        w.family(
            "sluice_http_response_body_bytes_total",
            "counter",
            "Response body bytes sent, by route.",
        );
        for (slot, (_, _, _, bout)) in &routes {
            let route = name(&route_names, *slot);
            w.sample(
                "sluice_http_response_body_bytes_total",
                &[("route", route)],
                bout,
            );
        }
        w.family(
            "sluice_http_requests_by_protocol_total",
            "counter",
            "HTTP requests answered, by the protocol they came by.",
        );
        for (i, p) in PROTOS.iter().enumerate() {
            w.sample(
                "sluice_http_requests_by_protocol_total",
                &[("protocol", p)],
                protocols[i],
            );
        }
        w.family(
            "sluice_http_requests_inflight",
            "gauge",
            "HTTP requests being answered now.",
        );
        w.sample("sluice_http_requests_inflight", &[], inflight);

        w.family(
            "sluice_connections",
            "gauge",
            "Client connections open now, by listener, protocol and state (idle: waiting for a request).",
        );
        for (i, l) in self.listeners.iter().enumerate() {
            for (p, proto) in ["http1", "http2"].iter().enumerate() {
                let (open, idle) = (conns[i].0[p], conns[i].1[p]);
                w.sample(
                    "sluice_connections",
                    &[("listener", l), ("protocol", proto), ("state", "active")],
                    open - idle,
                );
                w.sample(
                    "sluice_connections",
                    &[("listener", l), ("protocol", proto), ("state", "idle")],
                    idle,
                );
            }
        }
        w.family(
            "sluice_tls_handshakes_total",
            "counter",
            "TLS handshakes with clients, by result.",
        );
        w.sample("sluice_tls_handshakes_total", &[("result", "ok")], tls_ok);
        w.sample(
            "sluice_tls_handshakes_total",
            &[("result", "failed")],
            tls_failed,
        );

        w.family(
            "sluice_plugin_rejections_total",
            "counter",
            "Requests a plugin refused with a 4xx or 5xx (limits, auth, ip-restriction, breaker...), by plugin and status.",
        );
        for ((p, status), n) in &rejections {
            w.sample(
                "sluice_plugin_rejections_total",
                &[
                    ("plugin", p),
                    ("status", itoa::Buffer::new().format(*status)),
                ],
                n,
            );
        }

        w.family(
            "sluice_upstream_responses_total",
            "counter",
            "Upstream answers by status class; status \"none\": no node answered (502, 504).",
        );
        for (slot, (counts, _)) in &ups {
            let up = name(&up_names, *slot);
            for (i, n) in counts.iter().enumerate() {
                if *n > 0 {
                    let status = STATUSES.get(i).copied().unwrap_or("none");
                    w.sample(
                        "sluice_upstream_responses_total",
                        &[("upstream", up), ("status", status)],
                        n,
                    );
                }
            }
        }
        w.family(
            "sluice_upstream_response_duration_seconds",
            "histogram",
            "Time from sending a request to a node to its response head, by upstream.",
        );
        for (slot, (_, h)) in &ups {
            let up = name(&up_names, *slot);
            histogram(
                w,
                "sluice_upstream_response_duration_seconds",
                &[("upstream", up)],
                h,
            );
        }
        w.family(
            "sluice_stream_sessions_total",
            "counter",
            "Stream route (L4) sessions, by route and protocol.",
        );
        for ((slot, proto), v) in &streams {
            let r = name(&stream_names, *slot);
            w.sample(
                "sluice_stream_sessions_total",
                &[("route", r), ("protocol", proto)],
                v[0],
            );
        }
        w.family(
            "sluice_stream_sessions_active",
            "gauge",
            "Stream route (L4) sessions open now.",
        );
        for ((slot, proto), v) in &streams {
            let r = name(&stream_names, *slot);
            w.sample(
                "sluice_stream_sessions_active",
                &[("route", r), ("protocol", proto)],
                v[1],
            );
        }
        w.family(
            "sluice_stream_bytes_total",
            "counter",
            "Stream route bytes, by direction (in: from clients; out: to clients), counted when a session ends.",
        );
        for ((slot, proto), v) in &streams {
            let r = name(&stream_names, *slot);
            for (dir, n) in [("in", v[2]), ("out", v[3])] {
                w.sample(
                    "sluice_stream_bytes_total",
                    &[("route", r), ("protocol", proto), ("direction", dir)],
                    n,
                );
            }
        }
        w.family(
            "sluice_metrics_label_overflow_total",
            "counter",
            "Label values counted under \"other\" because metrics.max_label_values was reached, by label.",
        );
        for (label, n) in [
            ("route", route_folded),
            ("upstream", up_folded),
            ("stream_route", stream_folded),
        ] {
            w.sample(
                "sluice_metrics_label_overflow_total",
                &[("label", label)],
                n,
            );
        }
    }
}

/// Writes a histogram's buckets (cumulative), sum and count.
pub(super) fn histogram(w: &mut Writer<'_>, name: &str, labels: &[(&str, &str)], h: &HistSum) {
    let mut counts = [0u64; BOUNDS_NS.len() + 1];
    let mut cumulative = 0u64;
    for (c, b) in counts.iter_mut().zip(&h.buckets) {
        cumulative += b;
        *c = cumulative;
    }
    w.histogram(name, labels, &LES, &counts, h.sum_us as f64 / 1e6);
}

/// `BOUNDS_NS` in seconds, as the `le` label writes them.
pub(super) const LES: [&str; BOUNDS_NS.len() + 1] = [
    "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1",
    "2.5", "5", "10", "+Inf",
];
