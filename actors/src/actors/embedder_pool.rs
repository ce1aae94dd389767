//! The embedder pool actor: micro-batches concurrent embedding requests onto a fixed set
//! of inference workers (one ONNX Runtime session each).
//!
//! Supervised by the root supervisor, which rebuilds it if it fails. Requests queue in the
//! actor; whenever a worker is idle it takes up to `max_batch` queued texts, so batches grow
//! with load and a lone request at low load goes out at once (after at most `max_wait_ms`).
//! Inference is CPU-bound and runs on a blocking thread; the result comes back as a `Done`
//! message. Beyond `max_queue` waiting texts, requests are refused as `overloaded` at once.
//!
//! Two queues: queries (someone is waiting for a read) and background work (the indexer
//! embedding stored rows). A batch takes queries first and fills up with background work,
//! so a read waits for at most the batch already running, never for the indexer's backlog.
//! A second stage's late interaction (a query and its candidates, read token by token) takes
//! a worker of its own, after the queries waiting and before background work.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use super::directory::ActorInfo;
use super::mailbox::Slot;
use crate::embedder::token_sketch::{SketchQuery, sketch};
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

    /// Embeds texts someone is waiting for (a query), batched with whatever else waits.
    pub async fn embed(&self, texts: Vec<String>, timeout: Duration) -> MemoryResult<Embeddings> {
        self.0
            .get()?
            .ask(
                |reply| EmbedderMsg::Embed { texts, reply },
                timeout,
                "the embedder pool",
            )
            .await?
    }

    /// Embeds texts when no query is waiting (the indexer's backlog).
    pub async fn embed_background(
        &self,
        texts: Vec<String>,
        timeout: Duration,
    ) -> MemoryResult<Embeddings> {
        self.0
            .get()?
            .ask(
                |reply| EmbedderMsg::EmbedBackground { texts, reply },
                timeout,
                "the embedder pool",
            )
            .await?
    }

    /// Embeds texts when no query is waiting, each with the sketch of its token vectors
    /// (the indexer's backlog: both are stored).
    pub async fn embed_background_sketched(
        &self,
        texts: Vec<String>,
        timeout: Duration,
    ) -> MemoryResult<Vec<Sketched>> {
        self.0
            .get()?
            .ask(
                |reply| EmbedderMsg::EmbedBackgroundSketched { texts, reply },
                timeout,
                "the embedder pool",
            )
            .await?
    }

    /// How well each passage covers `query`, token by token (`token_sketch`), in passage
    /// order: the second stage's measure, for a read someone is waiting for. The model
    /// reads the query and the passages given as text; a stored sketch is read as it is.
    pub async fn late_interaction(
        &self,
        query: String,
        passages: Vec<Passage>,
        timeout: Duration,
    ) -> MemoryResult<Vec<f32>> {
        self.0
            .get()?
            .ask(
                |reply| EmbedderMsg::LateInteraction {
                    query,
                    passages,
                    reply,
                },
                timeout,
                "the embedder pool",
            )
            .await?
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

/// A batch's texts embedded, each with its sketch when the batch made them.
type BatchResult = Result<Vec<(Vec<f32>, Option<Vec<u8>>)>, EmbedError>;

/// One caller's request.
pub struct Job {
    texts: Vec<String>,
    reply: JobReply,
}

/// Where a request's answer goes: vectors, or vectors with their texts' sketches.
enum JobReply {
    Vectors(RpcReplyPort<MemoryResult<Embeddings>>),
    Sketched(RpcReplyPort<MemoryResult<Vec<Sketched>>>),
}

impl JobReply {
    fn fail(self, error: MemoryError) {
        match self {
            JobReply::Vectors(reply) => {
                let _ = reply.send(Err(error));
            }
            JobReply::Sketched(reply) => {
                let _ = reply.send(Err(error));
            }
        }
    }
}

/// A passage the second stage measures: its text (the model reads it) or the sketch stored
/// with it.
#[derive(Debug, Clone)]
pub enum Passage {
    Text(String),
    Sketch(Vec<u8>),
}

/// One caller's late interaction: a query and the passages to measure against it.
pub struct LateInteractionJob {
    query: String,
    passages: Vec<Passage>,
    reply: RpcReplyPort<MemoryResult<Vec<f32>>>,
}

/// What the pool runs, for readiness and the embedding registry.
#[derive(Debug, Clone)]
pub struct PoolStatus {
    pub model: ModelInfo,
    pub workers: usize,
}

pub enum EmbedderMsg {
    /// Embed these texts for a caller who is waiting (a query).
    Embed {
        texts: Vec<String>,
        reply: RpcReplyPort<MemoryResult<Embeddings>>,
    },
    /// Embed these texts when no query is waiting (the indexer's backlog).
    EmbedBackground {
        texts: Vec<String>,
        reply: RpcReplyPort<MemoryResult<Embeddings>>,
    },
    /// Embed these texts, with their sketches, when no query is waiting.
    EmbedBackgroundSketched {
        texts: Vec<String>,
        reply: RpcReplyPort<MemoryResult<Vec<Sketched>>>,
    },
    /// Measure how well each passage covers the query, token by token, for a caller who
    /// is waiting (a second stage).
    LateInteraction {
        query: String,
        passages: Vec<Passage>,
        reply: RpcReplyPort<MemoryResult<Vec<f32>>>,
    },
    /// The batching window closed: send what is queued.
    Dispatch,
    /// A worker finished a batch. `worker` is `None` when it panicked.
    Done {
        worker: Option<Box<dyn Embedder>>,
        jobs: Vec<Job>,
        result: BatchResult,
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
                    let _ = reply.send(Ok(Vec::new()));
                    return Ok(());
                }
                if state.queued_texts + texts.len() > state.config.max_queue {
                    metrics::counter!("butler_memory_embedder_refused_total").increment(1);
                    let _ = reply.send(Err(state.queue_full()));
                    return Ok(());
                }
                state.queued_texts += texts.len();
                state.queue.push_back(Job {
                    texts,
                    reply: JobReply::Vectors(reply),
                });
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
                    let _ = reply.send(Ok(Vec::new()));
                    return Ok(());
                }
                state.background.push_back(Job {
                    texts,
                    reply: JobReply::Vectors(reply),
                });
                state.dispatch(&myself);
            }
            EmbedderMsg::EmbedBackgroundSketched { texts, reply } => {
                state.info.begin();
                if texts.is_empty() {
                    let _ = reply.send(Ok(Vec::new()));
                    return Ok(());
                }
                state.background.push_back(Job {
                    texts,
                    reply: JobReply::Sketched(reply),
                });
                state.dispatch(&myself);
            }
            EmbedderMsg::LateInteraction {
                query,
                passages,
                reply,
            } => {
                state.info.begin();
                let texts = passages.len() + 1;
                if passages.is_empty() {
                    let _ = reply.send(Ok(Vec::new()));
                } else if state.queued_texts + texts > state.config.max_queue {
                    metrics::counter!("butler_memory_embedder_refused_total").increment(1);
                    let _ = reply.send(Err(state.queue_full()));
                } else {
                    state.queued_texts += texts;
                    state.late.push_back(LateInteractionJob {
                        query,
                        passages,
                        reply,
                    });
                    state.dispatch(&myself);
                }
            }
            EmbedderMsg::Measured {
                worker,
                job,
                result,
                elapsed,
            } => {
                metrics::histogram!("butler_memory_embedder_batch_size")
                    .record((job.passages.len() + 1) as f64);
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
                jobs,
                result,
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
                answer(jobs, result);
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
    /// then late interactions (a worker each), then background work.
    fn dispatch(&mut self, myself: &ActorRef<EmbedderMsg>) {
        while !self.queue.is_empty() || !self.late.is_empty() || !self.background.is_empty() {
            let Some(mut worker) = self.idle.pop() else {
                return;
            };
            if self.queue.is_empty()
                && let Some(job) = self.late.pop_front()
            {
                self.queued_texts -= job.passages.len() + 1;
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
            for (queue, counted) in [(&mut self.queue, true), (&mut self.background, false)] {
                while let Some(job) = queue.front() {
                    if !jobs.is_empty()
                        && texts.len() + job.texts.len() > self.config.max_batch.get()
                    {
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
                // A batch with a job that stores sketches reads them from the same run.
                let sketched = jobs
                    .iter()
                    .any(|j| matches!(j.reply, JobReply::Sketched(_)));
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    if sketched {
                        worker
                            .embed_with_sketches(&texts)
                            .map(|all| all.into_iter().map(|(v, s)| (v, Some(s))).collect())
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
                let _ = myself.cast(EmbedderMsg::Done {
                    worker,
                    jobs,
                    result,
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
/// `Measured`: the token vectors of the query and of the passages given as text in one
/// call, the latter sketched, then each passage's coverage of the query, every one
/// measured against a sketch so that stored and fresh passages compare.
fn measure(mut worker: Box<dyn Embedder>, job: LateInteractionJob, myself: ActorRef<EmbedderMsg>) {
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let texts: Vec<String> = std::iter::once(job.query.clone())
            .chain(job.passages.iter().filter_map(|p| match p {
                Passage::Text(text) => Some(text.clone()),
                Passage::Sketch(_) => None,
            }))
            .collect();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            worker.token_vectors(&texts).map(|vectors| {
                let mut vectors = vectors.into_iter();
                let query = SketchQuery::new(&vectors.next().expect("the query is first"));
                job.passages
                    .iter()
                    .map(|p| {
                        let fresh;
                        let stored = match p {
                            Passage::Sketch(s) => s,
                            Passage::Text(_) => {
                                fresh = sketch(&vectors.next().expect("a vector per text"));
                                &fresh
                            }
                        };
                        // A sketch of another format (stored by another version) counts as
                        // no match rather than failing the read.
                        query.measure(stored).unwrap_or(0.0)
                    })
                    .collect()
            })
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
        let _ = myself.cast(EmbedderMsg::Measured {
            worker,
            job,
            result,
            elapsed: started.elapsed(),
        });
    });
}

/// Splits a batch's embeddings (and sketches, when it made them) back into the requests
/// it came from.
fn answer(jobs: Vec<Job>, result: BatchResult) {
    match result {
        Ok(mut embedded) => {
            // Peel from the back so each job gets its own slice without copying.
            for job in jobs.into_iter().rev() {
                let rest = embedded.split_off(embedded.len() - job.texts.len());
                match job.reply {
                    JobReply::Vectors(reply) => {
                        let _ = reply.send(Ok(rest.into_iter().map(|(v, _)| v).collect()));
                    }
                    JobReply::Sketched(reply) => {
                        let sketched = rest
                            .into_iter()
                            .map(|(v, s)| (v, s.expect("a sketched batch sketches every text")))
                            .collect();
                        let _ = reply.send(Ok(sketched));
                    }
                }
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "embedding batch failed");
            for job in jobs {
                job.reply.fail(MemoryError::new(
                    ErrorCode::EmbedderFailed,
                    format!("embedding failed: {e}"),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actors::directory::{ActorDirectory, ActorKind};
    use crate::actors::mailbox::Mailbox;
    use crate::embedder::hashing::HashingEmbedder;
    use std::num::NonZeroUsize;

    fn config(max_batch: usize, max_queue: usize) -> EmbedderConfig {
        EmbedderConfig {
            onnxruntime_path: "unused".into(),
            model_path: "unused".into(),
            tokenizer_path: "unused".into(),
            model_name: "hashing".into(),
            model_sha256: "none".into(),
            workers: NonZeroUsize::MIN,
            intra_threads: NonZeroUsize::MIN,
            max_batch: NonZeroUsize::new(max_batch).unwrap(),
            max_wait_ms: 1,
            max_queue,
            max_tokens: 256,
            max_batch_tokens: 512,
        }
    }

    async fn pool(max_batch: usize, max_queue: usize) -> Mailbox<EmbedderMsg> {
        let info = ActorDirectory::default().entry(ActorKind::EmbedderPool, "pool");
        let (actor, _) = Actor::spawn(
            None,
            EmbedderPool,
            EmbedderPoolArgs {
                factory: Arc::new(|| Ok(Box::new(HashingEmbedder::default()) as Box<dyn Embedder>)),
                config: config(max_batch, max_queue),
                info: info.clone(),
            },
        )
        .await
        .unwrap();
        Mailbox::new(actor, info)
    }

    #[tokio::test]
    async fn concurrent_requests_get_their_own_vectors_back() {
        let pool = pool(8, 1000).await;
        let mut expected = HashingEmbedder::default();
        let requests: Vec<Vec<String>> = (0..20)
            .map(|i| (0..(i % 3 + 1)).map(|j| format!("text {i} {j}")).collect())
            .collect();
        let answers = futures::future::join_all(requests.iter().map(|texts| {
            let texts = texts.clone();
            let pool = pool.clone();
            async move {
                pool.ask(
                    |reply| EmbedderMsg::Embed { texts, reply },
                    Duration::from_secs(5),
                    "embedder",
                )
                .await
                .unwrap()
                .unwrap()
            }
        }))
        .await;
        for (texts, got) in requests.iter().zip(answers) {
            assert_eq!(got, expected.embed(texts).unwrap());
        }
    }

    #[tokio::test]
    async fn a_full_queue_refuses_at_once() {
        let pool = pool(1, 1).await;
        let texts: Vec<String> = vec!["a".into(), "b".into()];
        let err = pool
            .ask(
                |reply| EmbedderMsg::Embed { texts, reply },
                Duration::from_secs(5),
                "embedder",
            )
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(err.class(), crate::error::ErrorClass::Overloaded);
        assert!(err.retry_after_ms.is_some());
    }

    async fn late_interaction(
        pool: &Mailbox<EmbedderMsg>,
        query: &str,
        passages: &[&str],
    ) -> MemoryResult<Vec<f32>> {
        let passages = passages
            .iter()
            .map(|p| Passage::Text(p.to_string()))
            .collect();
        measured(pool, query, passages).await
    }

    async fn measured(
        pool: &Mailbox<EmbedderMsg>,
        query: &str,
        passages: Vec<Passage>,
    ) -> MemoryResult<Vec<f32>> {
        let query = query.to_owned();
        pool.ask(
            |reply| EmbedderMsg::LateInteraction {
                query,
                passages,
                reply,
            },
            Duration::from_secs(5),
            "embedder",
        )
        .await
        .unwrap()
    }

    /// Each passage comes back with its own measure, in order, beside queries batched as
    /// usual.
    #[tokio::test]
    async fn late_interaction_measures_each_passage_against_the_query() {
        let pool = pool(8, 1000).await;
        let passages = ["she took a pottery class", "a pottery fair", "quantum flux"];
        let (measures, query) = tokio::join!(
            late_interaction(&pool, "the pottery class?", &passages),
            pool.ask(
                |reply| EmbedderMsg::Embed {
                    texts: vec!["pottery".into()],
                    reply
                },
                Duration::from_secs(5),
                "embedder",
            )
        );
        // The stand-in's token vectors are one bucket each: a word against its own sketch
        // measures 1, against another word's about 0 (two random directions of ±1).
        let measures = measures.unwrap();
        assert_eq!(measures.len(), 3);
        assert!((measures[0] - 1.0).abs() < 1e-5, "{measures:?}");
        assert!((measures[1] - 0.5).abs() < 0.1, "{measures:?}");
        assert!(measures[2] < 0.2, "{measures:?}");
        assert_eq!(query.unwrap().unwrap().len(), 1);
    }

    /// A stored sketch is measured as it is: the model reads the query and the passages
    /// given as text only, and a passage measures the same either way.
    #[tokio::test]
    async fn a_stored_sketch_is_not_read_again() {
        let read = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let pool = counting_pool(read.clone()).await;
        let stored = HashingEmbedder::default()
            .embed_with_sketches(&["she took a pottery class".into()])
            .unwrap()
            .remove(0)
            .1;
        let measures = measured(
            &pool,
            "the pottery class?",
            vec![
                Passage::Sketch(stored),
                Passage::Text("she took a pottery class".into()),
                Passage::Text("quantum flux".into()),
            ],
        )
        .await
        .unwrap();
        assert_eq!(measures[0], measures[1], "{measures:?}");
        assert!(measures[2] < measures[0]);
        assert_eq!(
            read.load(std::sync::atomic::Ordering::SeqCst),
            3,
            "the query and two texts"
        );
    }

    /// A background request with sketches gets each text's vector (the same as without)
    /// and its sketch.
    #[tokio::test]
    async fn background_texts_come_back_with_their_sketches() {
        let pool = pool(8, 1000).await;
        let texts: Vec<String> = vec!["pottery class".into(), "quantum flux".into()];
        let sent = texts.clone();
        let sketched = pool
            .ask(
                |reply| EmbedderMsg::EmbedBackgroundSketched { texts: sent, reply },
                Duration::from_secs(5),
                "embedder",
            )
            .await
            .unwrap()
            .unwrap();
        let mut expected = HashingEmbedder::default();
        assert_eq!(
            sketched.iter().map(|(v, _)| v.clone()).collect::<Vec<_>>(),
            expected.embed(&texts).unwrap()
        );
        assert_eq!(sketched[0].1.len(), 1 + 2 * 64, "two tokens of 64 bytes");
    }

    /// An embedder that counts the texts it reads token by token.
    struct Counting(HashingEmbedder, Arc<std::sync::atomic::AtomicUsize>);

    impl Embedder for Counting {
        fn info(&self) -> &ModelInfo {
            self.0.info()
        }
        fn embed(&mut self, texts: &[String]) -> Result<Embeddings, EmbedError> {
            self.0.embed(texts)
        }
        fn token_vectors(
            &mut self,
            texts: &[String],
        ) -> Result<Vec<crate::embedder::TokenVectors>, EmbedError> {
            self.1
                .fetch_add(texts.len(), std::sync::atomic::Ordering::SeqCst);
            self.0.token_vectors(texts)
        }
    }

    /// A pool whose one worker counts what it reads token by token.
    async fn counting_pool(read: Arc<std::sync::atomic::AtomicUsize>) -> Mailbox<EmbedderMsg> {
        let (actor, info) = counting_actor(read).await;
        Mailbox::new(actor, info)
    }

    async fn counting_actor(
        counter: Arc<std::sync::atomic::AtomicUsize>,
    ) -> (ActorRef<EmbedderMsg>, Arc<ActorInfo>) {
        let info = ActorDirectory::default().entry(ActorKind::EmbedderPool, "pool");
        let (actor, _) = Actor::spawn(
            None,
            EmbedderPool,
            EmbedderPoolArgs {
                factory: Arc::new(move || {
                    Ok(
                        Box::new(Counting(HashingEmbedder::default(), counter.clone()))
                            as Box<dyn Embedder>,
                    )
                }),
                config: config(8, 1000),
                info: info.clone(),
            },
        )
        .await
        .unwrap();
        (actor, info)
    }

    /// A late interaction whose caller stopped waiting before a worker took it is dropped,
    /// not run; the next one still is.
    #[tokio::test]
    async fn a_late_interaction_nobody_waits_for_is_not_run() {
        let read = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (actor, info) = counting_actor(read.clone()).await;
        let (sender, receiver) = ractor::concurrency::oneshot();
        drop(receiver);
        actor
            .cast(EmbedderMsg::LateInteraction {
                query: "abandoned".into(),
                passages: vec![Passage::Text("a".into()), Passage::Text("b".into())],
                reply: sender.into(),
            })
            .unwrap();
        let pool = Mailbox::new(actor, info);
        let measures = late_interaction(&pool, "q", &["c"]).await.unwrap();
        assert_eq!(measures.len(), 1);
        assert_eq!(
            read.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "q and c only"
        );
    }

    /// A late interaction counts against the queue's bound like any texts waiting.
    #[tokio::test]
    async fn a_late_interaction_past_the_queue_bound_is_refused() {
        let pool = pool(1, 2).await;
        let err = late_interaction(&pool, "q", &["a", "b"]).await.unwrap_err();
        assert_eq!(err.class(), crate::error::ErrorClass::Overloaded);
    }
}
