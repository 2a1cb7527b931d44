//! Responses from a secret's host, scrubbed of the secret's value before they reach the sandbox:
//! an upstream that echoes its request (headers in a body, a debug endpoint, an error that
//! quotes the `Authorization` header) would otherwise hand the real value back inside.
//!
//! Headers and trailers are rewritten whole; the body is rewritten as it streams, keeping at
//! most the longest value's length minus one byte back between chunks, so a value split across
//! chunks is still found and memory stays bounded whatever the body's size.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

/// `(value, placeholder)` pairs: every occurrence of a value becomes its placeholder.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scrubber {
    pairs: Arc<Vec<(Vec<u8>, Vec<u8>)>>,
    /// Longest value length minus one: what a chunk may end with of a value that continues in
    /// the next one.
    keep: usize,
}

impl Scrubber {
    /// A scrubber of these `(value, placeholder)` pairs (empty values are skipped).
    pub(crate) fn new(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = pairs
            .into_iter()
            .filter(|(v, _)| !v.is_empty())
            .map(|(v, p)| (v.into_bytes(), p.into_bytes()))
            .collect();
        let keep = pairs.iter().map(|(v, _)| v.len()).max().unwrap_or(1) - 1;
        Scrubber {
            pairs: Arc::new(pairs),
            keep,
        }
    }

    /// Whether there is nothing to scrub.
    pub(crate) fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Appends `buf` to `out` up to the end of its last value, each value replaced by its
    /// placeholder; returns where that end is in `buf` (0 without any value).
    fn replace(&self, buf: &[u8], out: &mut Vec<u8>) -> usize {
        // The next occurrence of each value at or after `at`; a value is searched again only
        // once the text before it has been consumed, so the work stays linear in `buf`.
        let mut next: Vec<Option<usize>> = self.pairs.iter().map(|(v, _)| find(buf, v)).collect();
        let mut at = 0;
        loop {
            for (k, (v, _)) in self.pairs.iter().enumerate() {
                if next[k].is_some_and(|i| i < at) {
                    next[k] = find(&buf[at..], v).map(|i| at + i);
                }
            }
            // The leftmost occurrence of any value (the longest on a tie).
            let hit = next
                .iter()
                .enumerate()
                .filter_map(|(k, i)| i.map(|i| (i, k)))
                .min_by(|a, b| {
                    a.0.cmp(&b.0)
                        .then(self.pairs[b.1].0.len().cmp(&self.pairs[a.1].0.len()))
                });
            match hit {
                Some((i, k)) => {
                    let (value, placeholder) = &self.pairs[k];
                    out.extend_from_slice(&buf[at..i]);
                    out.extend_from_slice(placeholder);
                    at = i + value.len();
                }
                None => return at,
            }
        }
    }

    /// `bytes` with every value replaced (a whole header value or trailer).
    pub(crate) fn whole(&self, bytes: &[u8]) -> Option<Vec<u8>> {
        if self.pairs.iter().all(|(v, _)| find(bytes, v).is_none()) {
            return None;
        }
        let mut out = Vec::with_capacity(bytes.len());
        let end = self.replace(bytes, &mut out);
        out.extend_from_slice(&bytes[end..]);
        Some(out)
    }

    /// Rewrites every header value that carries a value.
    pub(crate) fn headers(&self, headers: &mut http::HeaderMap) {
        for value in headers.values_mut() {
            if let Some(clean) = self.whole(value.as_bytes()) {
                *value = http::HeaderValue::from_bytes(&clean)
                    .unwrap_or_else(|_| http::HeaderValue::from_static(""));
            }
        }
    }

    /// Wraps a response body.
    pub(crate) fn body<B>(&self, inner: B) -> ScrubbedBody<B> {
        ScrubbedBody {
            inner,
            scrubber: self.clone(),
            carry: Vec::new(),
            trailers: None,
            ended: false,
        }
    }

    /// Feeds one chunk: returns what may be sent now, keeping in `carry` the tail that may
    /// begin a value.
    fn feed(&self, carry: &mut Vec<u8>, chunk: &[u8]) -> Vec<u8> {
        carry.extend_from_slice(chunk);
        let mut out = Vec::with_capacity(carry.len());
        let end = self.replace(carry, &mut out);
        // Nothing before `hold` can begin a value that is not complete in `carry`.
        let hold = carry.len().saturating_sub(self.keep).max(end);
        out.extend_from_slice(&carry[end..hold]);
        carry.drain(..hold);
        out
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > haystack.len() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A body whose data frames are scrubbed as they stream ([`Scrubber::body`]).
pub(crate) struct ScrubbedBody<B> {
    inner: B,
    scrubber: Scrubber,
    carry: Vec<u8>,
    /// Trailers read while `carry` still held bytes: sent after them.
    trailers: Option<http::HeaderMap>,
    ended: bool,
}

impl<B> Body for ScrubbedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        loop {
            if this.ended {
                if !this.carry.is_empty() {
                    let rest = std::mem::take(&mut this.carry);
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest)))));
                }
                return Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))));
            }
            match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        let out = this.scrubber.feed(&mut this.carry, &data);
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                        }
                    }
                    Err(frame) => {
                        if let Ok(mut trailers) = frame.into_trailers() {
                            this.scrubber.headers(&mut trailers);
                            this.trailers = Some(trailers);
                        }
                        this.ended = true;
                    }
                },
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => this.ended = true,
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.carry.is_empty() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        // Scrubbing changes the length.
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn scrubber() -> Scrubber {
        Scrubber::new([
            ("SECRET-VALUE".to_string(), "ph-1".to_string()),
            ("tok".to_string(), "ph-2".to_string()),
        ])
    }

    /// A body of fixed data frames.
    struct Chunks(std::collections::VecDeque<Bytes>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.get_mut().0.pop_front().map(|b| Ok(Frame::data(b))))
        }
    }

    /// Feeds `chunks` through the streaming scrubber and returns everything it let out.
    async fn stream(chunks: &[&str]) -> String {
        let chunks = chunks.iter().map(|c| Bytes::from(c.to_string())).collect();
        let body = scrubber().body(Chunks(chunks));
        let bytes = body.collect().await.expect("collect").to_bytes();
        String::from_utf8(bytes.to_vec()).expect("utf-8")
    }

    #[tokio::test]
    async fn values_are_replaced_across_every_split() {
        let text = "a SECRET-VALUE b tok c SECRET-VALUESECRET-VALUE d";
        let want = "a ph-1 b ph-2 c ph-1ph-1 d";
        // Every way of cutting the text in two, and one byte at a time.
        for cut in 0..=text.len() {
            assert_eq!(
                stream(&[&text[..cut], &text[cut..]]).await,
                want,
                "cut {cut}"
            );
        }
        let bytes: Vec<String> = text.chars().map(String::from).collect();
        let refs: Vec<&str> = bytes.iter().map(String::as_str).collect();
        assert_eq!(stream(&refs).await, want);
        // A prefix of a value at the very end is sent as it is.
        assert_eq!(stream(&["xx SECRET-VAL"]).await, "xx SECRET-VAL");
        assert_eq!(stream(&["nothing here"]).await, "nothing here");
    }

    #[test]
    fn headers_are_rewritten_whole() {
        let mut h = http::HeaderMap::new();
        h.insert("x-echo", "Bearer SECRET-VALUE".parse().expect("value"));
        h.insert("x-other", "fine".parse().expect("value"));
        scrubber().headers(&mut h);
        assert_eq!(h["x-echo"], "Bearer ph-1");
        assert_eq!(h["x-other"], "fine");
        assert!(Scrubber::new([]).is_empty());
    }
}
