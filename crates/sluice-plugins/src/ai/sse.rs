//! Server-sent events (the WHATWG `text/event-stream` format): a stream split into events as its
//! bytes arrive, and an event's `event` and `data` fields. Written here: the format is a few
//! lines, and the splitter must hand each event on the moment its blank line arrives.

/// Splits a byte stream into events. An event ends at an empty line (`\n\n`, `\r\n\r\n`);
/// what follows the last one waits for the next bytes.
#[derive(Debug, Default)]
pub(crate) struct Splitter {
    /// The start of an event whose end has not arrived.
    pending: Vec<u8>,
}

impl Splitter {
    /// Adds `data` and calls `f` with each event it completes (its bytes, the blank line
    /// included), in order.
    pub(crate) fn feed(&mut self, data: &[u8], mut f: impl FnMut(&[u8])) {
        if self.pending.is_empty() {
            let used = split(data, &mut f);
            self.pending.extend_from_slice(&data[used..]);
        } else {
            self.pending.extend_from_slice(data);
            let pending = std::mem::take(&mut self.pending);
            let used = split(&pending, &mut f);
            self.pending = pending;
            self.pending.drain(..used);
        }
    }

    /// True when no event is waiting for its end.
    pub(crate) fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }

    /// What arrived after the last complete event (at the end of the stream: an event its
    /// sender did not end with a blank line).
    pub(crate) fn take_rest(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }
}

/// Calls `f` with each complete event of `data`; returns how many bytes they took.
fn split(data: &[u8], f: &mut impl FnMut(&[u8])) -> usize {
    let mut start = 0;
    let mut line = 0;
    let mut i = 0;
    while let Some(n) = memchr::memchr2(b'\n', b'\r', &data[i..]) {
        let at = i + n;
        let mut end = at + 1;
        if data[at] == b'\r' {
            match data.get(at + 1) {
                Some(b'\n') => end = at + 2,
                Some(_) => {}
                // A `\r` last: its `\n` may be in the next bytes.
                None => break,
            }
        }
        if at == line {
            // An empty line: the event ends here.
            if at > start {
                f(&data[start..end]);
            }
            start = end;
        }
        line = end;
        i = end;
    }
    start
}

/// An event's fields.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Event<'a> {
    /// Its `event` field (None: the default, `message`).
    pub(crate) event: Option<&'a [u8]>,
    /// Its `data` lines, joined by `\n` (the first only borrowed).
    pub(crate) data: std::borrow::Cow<'a, [u8]>,
    /// Whether it has a data field.
    pub(crate) has_data: bool,
}

/// Reads an event's fields (comments, lines starting with `:`, are left out).
pub(crate) fn parse(event: &[u8]) -> Event<'_> {
    let mut out = Event::default();
    for line in event.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() || line[0] == b':' {
            continue;
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(c) => {
                let v = &line[c + 1..];
                (&line[..c], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"event" => out.event = Some(value),
            b"data" => {
                if out.has_data {
                    let d = out.data.to_mut();
                    d.push(b'\n');
                    d.extend_from_slice(value);
                } else {
                    out.data = std::borrow::Cow::Borrowed(value);
                    out.has_data = true;
                }
            }
            _ => {}
        }
    }
    out
}

/// Writes a `data:` event.
pub(crate) fn data_event(out: &mut Vec<u8>, data: &[u8]) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(pieces: &[&[u8]]) -> (Vec<Vec<u8>>, Vec<u8>) {
        let mut s = Splitter::default();
        let mut got = Vec::new();
        for p in pieces {
            s.feed(p, |e| got.push(e.to_vec()));
        }
        (got, s.take_rest())
    }

    #[test]
    fn events_end_at_a_blank_line_however_the_bytes_are_split() {
        let whole = b"data: a\n\nevent: x\r\ndata: b\r\n\r\ndata: c\n\ndata: d";
        for cut in 0..whole.len() {
            let (got, rest) = events(&[&whole[..cut], &whole[cut..]]);
            assert_eq!(
                got,
                [
                    b"data: a\n\n".to_vec(),
                    b"event: x\r\ndata: b\r\n\r\n".to_vec(),
                    b"data: c\n\n".to_vec()
                ],
                "cut at {cut}"
            );
            assert_eq!(rest, b"data: d");
        }
    }

    #[test]
    fn fields_are_read_as_the_format_says() {
        let e = parse(b": comment\nevent: message_delta\ndata: {\"a\":1}\n\n");
        assert_eq!(e.event, Some(&b"message_delta"[..]));
        assert_eq!(&*e.data, b"{\"a\":1}");
        let e = parse(b"data:one\ndata: two\n\n");
        assert_eq!(&*e.data, b"one\ntwo");
        assert!(!parse(b"event: ping\n\n").has_data);
    }
}
