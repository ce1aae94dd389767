//! The embedder pool actor: micro-batches concurrent embedding requests onto a fixed set
//! of inference workers (one ONNX Runtime session each).
//!
//! Supervised by the root supervisor, which rebuilds it if it fails. Requests queue in the
//! actor; whenever a worker is idle it takes up to `max_batch` queued texts, so batches grow
//! with load and a lone request at low load goes out at once (after at most `max_wait_ms`).
//! Inference is CPU-bound and runs on a blocking thread, which answers the batch's requests
//! (`jobs.rs`) and reports the worker free with a `Done` message. Beyond `max_queue`
//! waiting texts, requests are refused as `overloaded` at once.
//!
//! Two queues: queries (someone is waiting for a read) and background work (the indexer
//! embedding stored rows). A batch takes queries first and fills up with background work,
//! so a read waits for at most the batch already running, never for the indexer's backlog.
//! A second stage's late interaction (a query and its candidates, read token by token,
//! `late_interaction.rs`) takes a worker of its own, after the queries waiting and before
//! background work.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

mod jobs;
mod late_interaction;

use jobs::answer;
pub use jobs::{Asked, Job, JobReply};
pub use late_interaction::{LateInteractionJob, Passage, Question, measure_sketches};

use super::directory::ActorInfo;
use super::mailbox::Slot;
use crate::embedder::{EmbedError, Embedder, EmbedderConfig, ModelInfo, Sketched};
use crate::error::{ErrorCode, MemoryError, MemoryResult};

/// How the rest of the engine reaches the pool, whichever pool is running: the supervisor
/// fills the slot at every (re)start.
#[derive(Debug, Clone)]
pub struct EmbedderHandle(Arc<Slot<EmbedderMsg>>);

impl EmbedderHandle {
    pub fn new() -> Self {
        EmbedderHandle(Arc::new(Slot::new("embedder pool")))
    }

    /// Where the supervisor publishes the running pool's mailbox.
    pub fn slot(&self) -> &Slot<EmbedderMsg> {
        &self.0
    }

    /// Asks the running pool, within `timeout`, for an answer that may itself be an error.
    async fn call<R: Send + 'static>(
        &self,
        build: impl FnOnce(RpcReplyPort<MemoryResult<R>>) -> EmbedderMsg,
        timeout: Duration,
    ) -> MemoryResult<R> {
        self.0
            .get()?
            .ask(build, timeout, "the embedder pool")
            .await?
    }

    /// Asks for `texts` embedded, answered through `reply` (vectors, or with sketches or
    /// questions): as a query someone waits for, or as background work.
    async fn job<R: Send + 'static>(
        &self,
        texts: Vec<String>,
        background: bool,
        reply: fn(RpcReplyPort<MemoryResult<R>>) -> JobReply,
        timeout: Duration,
    ) -> MemoryResult<R> {
        self.call(
            |port| {
                let reply = reply(port);
                if background {
                    EmbedderMsg::EmbedBackground { texts, reply }
                } else {
                    EmbedderMsg::Embed { texts, reply }
                }
            },
            timeout,
        )
        .await
    }

    /// Embeds texts someone is waiting for (a query), batched with whatever else waits.
    pub async fn embed(&self, texts: Vec<String>, timeout: Duration) -> MemoryResult<Embeddings> {
        self.job(texts, false, JobReply::Vectors, timeout).await
    }

    /// Embeds texts someone is waiting for, each also as a question the second stage can
    /// measure sketches against (`token_sketch::SketchQuery`), from the same model run.
    pub async fn embed_questions(
        &self,
        texts: Vec<String>,
        timeout: Duration,
    ) -> MemoryResult<Vec<Asked>> {
        self.job(texts, false, JobReply::Questions, timeout).await
    }

    /// Embeds texts when no query is waiting (the indexer's backlog).
    pub async fn embed_background(
        &self,
        texts: Vec<String>,
        timeout: Duration,
    ) -> MemoryResult<Embeddings> {
        self.job(texts, true, JobReply::Vectors, timeout).await
    }

    /// Embeds texts when no query is waiting, each with the sketch of its token vectors
    /// (the indexer's backlog: both are stored).
    pub async fn embed_background_sketched(
        &self,
        texts: Vec<String>,
        timeout: Duration,
    ) -> MemoryResult<Vec<Sketched>> {
        self.job(texts, true, JobReply::Sketched, timeout).await
    }

    /// How well each passage covers `question`, token by token (`token_sketch`), in
    /// passage order: the second stage's measure, for a read someone is waiting for. The
    /// model reads the question when it comes as text, and the passages given as text; a
    /// stored sketch is read as it is.
    pub async fn late_interaction(
        &self,
        question: Question,
        passages: Vec<Passage>,
        timeout: Duration,
    ) -> MemoryResult<Vec<f32>> {
        self.call(
            |reply| EmbedderMsg::LateInteraction {
                question,
                passages,
                reply,
            },
            timeout,
        )
        .await
    }

    /// The pool's model and workers.
    pub async fn status(&self, timeout: Duration) -> MemoryResult<PoolStatus> {
        self.0
            .get()?
            .ask(
                |reply| EmbedderMsg::Status { reply },
                timeout,
                "the embedder pool",
            )
            .await
    }
}

/// Builds one inference worker.
pub type EmbedderFactory = Arc<dyn Fn() -> Result<Box<dyn Embedder>, EmbedError> + Send + Sync>;

/// Embeddings for a request, in request order.
pub type Embeddings = Vec<Vec<f32>>;

pub struct EmbedderPool;

pub struct EmbedderPoolArgs {
    pub factory: EmbedderFactory,
    pub config: EmbedderConfig,
    pub info: Arc<ActorInfo>,
}

/// What the pool runs, for readiness and the embedding registry.
#[derive(Debug, Clone)]
pub struct PoolStatus {
    pub model: ModelInfo,
    pub workers: usize,
}

pub enum EmbedderMsg {
    /// Embed these texts (as questions, when the reply wants them) for a caller who is
    /// waiting (a query).
    Embed {
        texts: Vec<String>,
        reply: JobReply,
    },
    /// Embed these texts (with their sketches, when the reply wants them) when no query is
    /// waiting (the indexer's backlog).
    EmbedBackground {
        texts: Vec<String>,
        reply: JobReply,
    },
    /// Measure how well each passage covers the query, token by token, for a caller who
    /// is waiting (a second stage).
    LateInteraction {
        question: Question,
        passages: Vec<Passage>,
        reply: RpcReplyPort<MemoryResult<Vec<f32>>>,
    },
    /// The batching window closed: send what is queued.
    Dispatch,
    /// A worker finished a batch (and answered its jobs). `worker` is `None` when it
    /// panicked.
    Done {
        worker: Option<Box<dyn Embedder>>,
        texts: usize,
        elapsed: Duration,
    },
    /// A worker finished a late interaction. `worker` is `None` when it panicked.
    Measured {
        worker: Option<Box<dyn Embedder>>,
        job: LateInteractionJob,
        result: Result<Vec<f32>, EmbedError>,
        elapsed: Duration,
    },
    Status {
        reply: RpcReplyPort<PoolStatus>,
    },
}

pub struct EmbedderPoolState {
    factory: EmbedderFactory,
    config: EmbedderConfig,
    info: Arc<ActorInfo>,
    model: ModelInfo,
    idle: Vec<Box<dyn Embedder>>,
    workers: usize,
    queue: VecDeque<Job>,
    queued_texts: usize,
    background: VecDeque<Job>,
    /// Late interactions waiting for a worker (their texts count in `queued_texts`).
    late: VecDeque<LateInteractionJob>,
    dispatch_scheduled: bool,
}

impl Actor for EmbedderPool {
    type Msg = EmbedderMsg;
    type State = EmbedderPoolState;
    type Arguments = EmbedderPoolArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: EmbedderPoolArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let factory = args.factory.clone();
        let count = args.config.workers.get();
        // Loading a model reads and optimises ~23 MB: keep it off the async workers. Each
        // worker then embeds one text, so that the first request after a start does not
        // also pay for the runtime's first allocations.
        let idle = tokio::task::spawn_blocking(move || {
            (0..count)
                .map(|_| {
                    let mut worker = factory()?;
                    let started = Instant::now();
                    // A failure here is the first request's to report, not a reason to stop.
                    match worker.embed(&["warm-up".to_owned()]) {
                        Ok(_) => tracing::debug!(elapsed = ?started.elapsed(), "embedder worker warmed up"),
                        Err(e) => tracing::warn!(error = %e, "embedder warm-up failed"),
                    }
                    Ok::<_, EmbedError>(worker)
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .await??;
        let model = idle
            .first()
            .map(|w| w.info().clone())
            .ok_or("embedder.workers must be at least 1")?;
        args.info.started();
        Ok(EmbedderPoolState {
            factory: args.factory,
            info: args.info,
            model,
            workers: idle.len(),
            idle,
            config: args.config,
            queue: VecDeque::new(),
            queued_texts: 0,
            background: VecDeque::new(),
            late: VecDeque::new(),
            dispatch_scheduled: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            EmbedderMsg::Embed { texts, reply } => {
                state.info.begin();
                if texts.is_empty() {
                    reply.nothing();
                    return Ok(());
                }
                if state.queued_texts + texts.len() > state.config.max_queue {
                    metrics::counter!("butler_memory_embedder_refused_total").increment(1);
                    reply.fail(state.queue_full());
                    return Ok(());
                }
                state.queued_texts += texts.len();
                state.queue.push_back(Job { texts, reply });
                let full = state.queued_texts >= state.config.max_batch.get();
                if state.config.max_wait_ms == 0 || full {
                    state.dispatch(&myself);
                } else if !state.dispatch_scheduled && !state.idle.is_empty() {
                    state.dispatch_scheduled = true;
                    myself.send_after(Duration::from_millis(state.config.max_wait_ms), || {
                        EmbedderMsg::Dispatch
                    });
                }
            }
            EmbedderMsg::EmbedBackground { texts, reply } => {
                state.info.begin();
                if texts.is_empty() {
                    reply.nothing();
                    return Ok(());
                }
                state.background.push_back(Job { texts, reply });
                state.dispatch(&myself);
            }
            EmbedderMsg::LateInteraction {
                question,
                passages,
                reply,
            } => {
                state.info.begin();
                let job = LateInteractionJob {
                    question,
                    passages,
                    reply,
                };
                if job.passages.is_empty() {
                    let _ = job.reply.send(Ok(Vec::new()));
                } else if state.queued_texts + job.texts() > state.config.max_queue {
                    metrics::counter!("butler_memory_embedder_refused_total").increment(1);
                    let _ = job.reply.send(Err(state.queue_full()));
                } else {
                    state.queued_texts += job.texts();
                    state.late.push_back(job);
                    state.dispatch(&myself);
                }
            }
            EmbedderMsg::Measured {
                worker,
                job,
                result,
                elapsed,
            } => {
                metrics::histogram!("butler_memory_embedder_batch_size").record(job.texts() as f64);
                metrics::histogram!("butler_memory_embedder_batch_seconds")
                    .record(elapsed.as_secs_f64());
                match worker {
                    Some(worker) => state.idle.push(worker),
                    None => state.replace_lost_worker().await,
                }
                let _ = job.reply.send(result.map_err(|e| {
                    MemoryError::new(
                        ErrorCode::EmbedderFailed,
                        format!("late interaction failed: {e}"),
                    )
                }));
                state.dispatch(&myself);
            }
            EmbedderMsg::Dispatch => {
                state.dispatch_scheduled = false;
                state.dispatch(&myself);
            }
            EmbedderMsg::Done {
                worker,
                texts,
                elapsed,
            } => {
                metrics::histogram!("butler_memory_embedder_batch_size").record(texts as f64);
                metrics::histogram!("butler_memory_embedder_batch_seconds")
                    .record(elapsed.as_secs_f64());
                metrics::counter!("butler_memory_embedder_texts_total").increment(texts as u64);
                match worker {
                    Some(worker) => state.idle.push(worker),
                    None => state.replace_lost_worker().await,
                }
                state.dispatch(&myself);
            }
            EmbedderMsg::Status { reply } => {
                state.info.begin();
                let _ = reply.send(PoolStatus {
                    model: state.model.clone(),
                    workers: state.workers,
                });
            }
        }
        metrics::gauge!("butler_memory_embedder_queue_depth").set(state.queued_texts as f64);
        Ok(())
    }
}

impl EmbedderPoolState {
    /// Why a request is refused at once: too many texts wait already.
    fn queue_full(&self) -> MemoryError {
        MemoryError::overloaded(
            ErrorCode::EmbedderQueueFull,
            format!(
                "the embedder has {} texts waiting (limit {})",
                self.queued_texts, self.config.max_queue
            ),
            50,
        )
    }

    /// Hands queued work to idle workers, up to `max_batch` texts each: queries first,
    /// then late interactions (a worker each), then background work up to
    /// `background_batch` texts a batch.
    fn dispatch(&mut self, myself: &ActorRef<EmbedderMsg>) {
        while !self.queue.is_empty() || !self.late.is_empty() || !self.background.is_empty() {
            let Some(mut worker) = self.idle.pop() else {
                return;
            };
            if self.queue.is_empty()
                && let Some(job) = self.late.pop_front()
            {
                self.queued_texts -= job.texts();
                if job.reply.is_closed() {
                    // Its read stopped waiting (the second stage's timeout) and went on with
                    // the first stage's order: a model run for nobody would only delay the
                    // next one.
                    self.idle.push(worker);
                } else {
                    measure(worker, job, myself.clone());
                }
                continue;
            }
            let mut jobs = Vec::new();
            let mut texts = Vec::new();
            // Background work fills a batch only up to `background_batch` texts: a query
            // that comes while the batch runs waits for all of it.
            let (queries, background) = (self.config.max_batch, self.config.background_batch);
            for (queue, counted, limit) in [
                (&mut self.queue, true, queries),
                (&mut self.background, false, background),
            ] {
                while let Some(job) = queue.front() {
                    if !jobs.is_empty() && texts.len() + job.texts.len() > limit.get() {
                        break;
                    }
                    let job = queue.pop_front().expect("front exists");
                    if counted {
                        self.queued_texts -= job.texts.len();
                    }
                    texts.extend(job.texts.iter().cloned());
                    jobs.push(job);
                }
            }
            let myself = myself.clone();
            tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                let count = texts.len();
                // A batch with a job that wants token vectors (sketches to store, questions
                // to measure) reads them from the same run.
                let tokens = jobs
                    .iter()
                    .any(|j| !matches!(j.reply, JobReply::Vectors(_)));
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    if tokens {
                        worker
                            .embed_with_tokens(&texts)
                            .map(|all| all.into_iter().map(|(v, t)| (v, Some(t))).collect())
                    } else {
                        worker
                            .embed(&texts)
                            .map(|all| all.into_iter().map(|v| (v, None)).collect())
                    }
                }));
                let (worker, result) = match outcome {
                    Ok(result) => (Some(worker), result),
                    Err(_) => (
                        None,
                        Err(EmbedError::Inference(
                            "the inference worker panicked".into(),
                        )),
                    ),
                };
                // Answered here, on the blocking thread: sketches and questions are
                // projections of every token, work for a worker rather than the actor.
                answer(jobs, result);
                let _ = myself.cast(EmbedderMsg::Done {
                    worker,
                    texts: count,
                    elapsed: started.elapsed(),
                });
            });
        }
    }

    /// A worker panicked mid-batch and may be corrupt: build a fresh one.
    async fn replace_lost_worker(&mut self) {
        tracing::error!("an embedder worker panicked; replacing it");
        self.info.failed("an inference worker panicked".into());
        let factory = self.factory.clone();
        match tokio::task::spawn_blocking(move || factory()).await {
            Ok(Ok(worker)) => self.idle.push(worker),
            Ok(Err(e)) => {
                self.workers -= 1;
                tracing::error!(error = %e, "could not replace the embedder worker");
            }
            Err(e) => {
                self.workers -= 1;
                tracing::error!(error = %e, "could not replace the embedder worker");
            }
        }
    }
}

/// Runs one late interaction on `worker`, on a blocking thread, and reports it as
/// `Measured`.
fn measure(mut worker: Box<dyn Embedder>, job: LateInteractionJob, myself: ActorRef<EmbedderMsg>) {
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| job.run(worker.as_mut())));
        let (worker, result) = match outcome {
            Ok(result) => (Some(worker), result),
            Err(_) => (
                None,
                Err(EmbedError::Inference(
                    "the inference worker panicked".into(),
                )),
            ),
        };
        let _ = myself.cast(EmbedderMsg::Measured {
            worker,
            job,
            result,
            elapsed: started.elapsed(),
        });
    });
}

#[cfg(test)]
mod tests;
