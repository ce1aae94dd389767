//! Sending to an actor with the bookkeeping every send needs: queue-depth accounting for
//! `/actors` and a timeout on every call, mapped onto classified errors. A [`Slot`] holds
//! the current mailbox of a supervised singleton, which its supervisor replaces when it
//! restarts the actor.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use ractor::rpc::CallResult;
use ractor::{ActorRef, Message, RpcReplyPort};

use super::directory::ActorInfo;
use crate::error::{ErrorCode, MemoryError, MemoryResult};

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
            Ok(CallResult::Timeout) => Err(MemoryError::new(
                ErrorCode::Timeout,
                format!("{what} did not answer within {} ms", timeout.as_millis()),
            )),
            // The actor stopped (or was restarted) before answering: nothing was done for
            // this request, so it is safe to retry.
            Ok(CallResult::SenderError) => Err(MemoryError::new(
                ErrorCode::ActorRestarted,
                format!("{what} stopped before answering; retry"),
            )),
            Err(_) => {
                self.info.not_enqueued();
                Err(MemoryError::new(
                    ErrorCode::ActorStopped,
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

/// The current mailbox of a supervised singleton (the embedder pool, the indexer), replaced
/// when its supervisor restarts it. Whoever talks to the actor holds the slot, not a mailbox
/// that a restart would leave dead.
pub struct Slot<M: Message> {
    // A lock rather than a channel: reads vastly outnumber the rare restarts.
    current: RwLock<Option<Mailbox<M>>>,
    name: &'static str,
}

impl<M: Message> std::fmt::Debug for Slot<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("name", &self.name)
            .field("up", &self.is_up())
            .finish()
    }
}

impl<M: Message> Slot<M> {
    pub fn new(name: &'static str) -> Self {
        Slot {
            current: RwLock::new(None),
            name,
        }
    }

    /// The running actor's mailbox, or `unavailable` while it is down.
    pub fn get(&self) -> MemoryResult<Mailbox<M>> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| {
                MemoryError::new(
                    ErrorCode::ActorDown,
                    format!("the {} is not running", self.name),
                )
            })
    }

    pub fn set(&self, mailbox: Option<Mailbox<M>>) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = mailbox;
    }

    pub fn is_up(&self) -> bool {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }
}
