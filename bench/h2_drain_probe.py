#!/usr/bin/env python3
# An HTTP/2 client (prior knowledge) that says what a server's shutdown did to each stream, for
# bench/upgrade.sh: CONNS connections, each keeping STREAMS requests in flight on PATH until
# SECONDS have passed, reconnecting when a connection ends. Follows RFC 9113 §6.8: after a
# GOAWAY it opens no stream; a stream above the GOAWAY's last stream id was not processed and
# is sent again on a new connection (counted as "retried"). What counts as failed: a stream
# reset (RST_STREAM), a stream the GOAWAY said was processed but that never ended, a status
# other than 200, a connection that could not be made. Needs the `h2` package (PyPI).
#   bench/h2_drain_probe.py SECONDS CONNS STREAMS PORT PATH
import socket, sys, threading, time

import h2.config, h2.connection, h2.events

secs, conns, streams, port, path = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
stop_at = time.time() + secs
lock = threading.Lock()
tally = {"ok": 0, "retried": 0, "reset": 0, "cut": 0, "bad_status": 0, "connect_failed": 0,
         "goaways": 0, "connections": 0}
notes = []


def add(k, n=1, note=None):
    with lock:
        tally[k] += n
        if note and len(notes) < 20:
            notes.append(note)


def connection(backlog):
    """One connection; returns the requests it could not send (to retry on the next)."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
    except OSError as e:
        add("connect_failed", note="connect: %s" % e)
        time.sleep(0.05)
        return backlog
    add("connections")
    c = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding=None))
    c.initiate_connection()
    headers = [(":method", "GET"), (":scheme", "http"), (":authority", "127.0.0.1:%d" % port), (":path", path)]
    open_streams = {}  # stream id -> status (None until the head)
    goaway_last = None
    pending = backlog

    def start():
        sid = c.get_next_available_stream_id()
        c.send_headers(sid, headers, end_stream=True)
        open_streams[sid] = None

    while (pending or time.time() < stop_at) and goaway_last is None and len(open_streams) < streams:
        start()
        pending = max(0, pending - 1)
    s.sendall(c.data_to_send())
    while open_streams:
        try:
            data = s.recv(65536)
        except OSError as e:
            data = b""
            add("cut", len(open_streams), "connection error: %s" % e)
            open_streams.clear()
            break
        if not data:
            # Streams the GOAWAY did not cover were never processed: sent again.
            unprocessed = [sid for sid in open_streams if goaway_last is not None and sid > goaway_last]
            covered = len(open_streams) - len(unprocessed)
            if covered:
                add("cut", covered, "closed with %d processed streams open (GOAWAY %s)" % (covered, goaway_last))
            pending += len(unprocessed)
            open_streams.clear()
            break
        for ev in c.receive_data(data):
            if isinstance(ev, h2.events.ResponseReceived):
                open_streams[ev.stream_id] = dict(ev.headers).get(b":status")
            elif isinstance(ev, h2.events.DataReceived):
                c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                status = open_streams.pop(ev.stream_id, None)
                if status == b"200":
                    add("ok")
                else:
                    add("bad_status", note="status %r" % status)
                if goaway_last is None and time.time() < stop_at:
                    start()
            elif isinstance(ev, h2.events.StreamReset):
                if ev.stream_id in open_streams:
                    open_streams.pop(ev.stream_id)
                    if ev.error_code == 7 and goaway_last is not None:  # REFUSED_STREAM
                        pending += 1
                        add("retried")
                    else:
                        add("reset", note="RST_STREAM %s on stream %d" % (ev.error_code, ev.stream_id))
            elif isinstance(ev, h2.events.ConnectionTerminated):
                add("goaways")
                goaway_last = ev.last_stream_id
                for sid in [sid for sid in open_streams if sid > goaway_last]:
                    open_streams.pop(sid)
                    pending += 1
                    add("retried")
        out = c.data_to_send()
        if out:
            try:
                s.sendall(out)
            except OSError:
                pass
    s.close()
    return pending


def client():
    backlog = 0
    while time.time() < stop_at or backlog:
        backlog = connection(backlog)


threads = [threading.Thread(target=client) for _ in range(conns)]
for t in threads:
    t.start()
for t in threads:
    t.join()
failed = tally["reset"] + tally["cut"] + tally["bad_status"] + tally["connect_failed"]
print(" ".join("%s=%d" % kv for kv in tally.items()) + " failed=%d" % failed)
for n in notes[:10]:
    print("note:", n)
