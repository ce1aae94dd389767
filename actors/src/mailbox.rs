//! Sending to an actor with the bookkeeping every send needs: queue-depth accounting for
//! `/actors` and a timeout on every call, mapped onto classified errors.

use std::sync::Arc;
use std::time::Duration;

use ractor::rpc::CallResult;
use ractor::{ActorRef, Message, RpcReplyPort};

use crate::actor_directory::ActorInfo;
use crate::error::{MemoryError, MemoryResult};

/// An actor reference paired with its directory entry.
pub struct Mailbox<M: Message> {
    pub actor: ActorRef<M>,
    pub info: Arc<ActorInfo>,
}

impl<M: Message> std::fmt::Debug for Mailbox<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailbox")
            .field("actor", &self.actor.get_id())
            .field("key", &self.info.key)
            .finish()
    }
}

impl<M: Message> Clone for Mailbox<M> {
    fn clone(&self) -> Self {
        Mailbox {
            actor: self.actor.clone(),
            info: self.info.clone(),
        }
    }
}

impl<M: Message> Mailbox<M> {
    pub fn new(actor: ActorRef<M>, info: Arc<ActorInfo>) -> Self {
        Mailbox { actor, info }
    }

    /// Sends a request and waits at most `timeout` for the answer.
    pub async fn ask<R, F>(&self, build: F, timeout: Duration, what: &str) -> MemoryResult<R>
    where
        F: FnOnce(RpcReplyPort<R>) -> M,
        R: Send + 'static,
    {
        self.info.enqueued();
        match self.actor.call(build, Some(timeout)).await {
            Ok(CallResult::Success(reply)) => Ok(reply),
            Ok(CallResult::Timeout) => Err(MemoryError::unavailable(
                "timeout",
                format!("{what} did not answer within {} ms", timeout.as_millis()),
            )),
            // The actor stopped (or was restarted) before answering: nothing was done for
            // this request, so it is safe to retry.
            Ok(CallResult::SenderError) => Err(MemoryError::unavailable(
                "actor_restarted",
                format!("{what} stopped before answering; retry"),
            )),
            Err(_) => {
                self.info.not_enqueued();
                Err(MemoryError::unavailable(
                    "actor_stopped",
                    format!("{what} is not running; retry"),
                ))
            }
        }
    }

    /// Sends a message without waiting for an answer. Returns false when the actor is gone.
    pub fn tell(&self, message: M) -> bool {
        self.info.enqueued();
        if self.actor.cast(message).is_ok() {
            true
        } else {
            self.info.not_enqueued();
            false
        }
    }
}
