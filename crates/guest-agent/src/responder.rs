//! Sending the answer(s) of one request: every frame goes through the connection's bounded
//! writer queue, so a slow host paces the handler.

use cove_guest_protocol::{GuestFrame, Response};
use tokio::sync::mpsc;

/// Budget of one `EntriesPart`/`CommandsPart` frame, by estimate (well under the frame limit).
const PART_BUDGET: usize = 256 * 1024;

/// Sends the responses of one request.
#[derive(Clone)]
pub struct Responder {
    id: u64,
    tx: mpsc::Sender<GuestFrame>,
}

impl Responder {
    /// The responder of request `id`, whose frames go to the connection's writer through `tx`.
    pub fn new(id: u64, tx: mpsc::Sender<GuestFrame>) -> Self {
        Self { id, tx }
    }

    /// Queues a response; `false` when the connection is gone.
    pub async fn send(&self, response: Response) -> bool {
        self.tx
            .send(GuestFrame {
                id: self.id,
                response,
            })
            .await
            .is_ok()
    }

    /// Queues a response from a blocking thread; `false` when the connection is gone.
    pub fn blocking_send(&self, response: Response) -> bool {
        self.tx
            .blocking_send(GuestFrame {
                id: self.id,
                response,
            })
            .is_ok()
    }

    /// Resolves when the connection is gone.
    pub async fn closed(&self) {
        self.tx.closed().await
    }
}

/// Sends a list as `part` frames of bounded size, the last one as `last`.
pub async fn send_in_parts<T>(
    r: &Responder,
    items: Vec<T>,
    size: impl Fn(&T) -> usize,
    part: impl Fn(Vec<T>) -> Response,
    last: impl FnOnce(Vec<T>) -> Response,
) {
    let mut current = Vec::new();
    let mut bytes = 0;
    for item in items {
        let s = size(&item);
        if !current.is_empty() && bytes + s > PART_BUDGET {
            if !r.send(part(std::mem::take(&mut current))).await {
                return;
            }
            bytes = 0;
        }
        bytes += s;
        current.push(item);
    }
    r.send(last(current)).await;
}
