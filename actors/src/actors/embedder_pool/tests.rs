//! The embedder pool's tests, with the hashing stand-in for the model: batching, the queue's
//! bound, late interactions and sketches.

use super::*;
use crate::actors::directory::{ActorDirectory, ActorKind};
use crate::actors::mailbox::Mailbox;
use crate::embedder::hashing::HashingEmbedder;
use crate::embedder::token_sketch::SketchQuery;
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
        background_batch: NonZeroUsize::new(max_batch).unwrap(),
        max_wait_ms: 1,
        max_queue,
        max_tokens: 256,
        max_batch_tokens: 512,
    }
}

async fn pool(max_batch: usize, max_queue: usize) -> Mailbox<EmbedderMsg> {
    spawned(
        config(max_batch, max_queue),
        Arc::new(|| Ok(Box::new(HashingEmbedder::default()) as Box<dyn Embedder>)),
    )
    .await
}

/// A pool with `config`, its workers' embedders made by `factory`.
async fn spawned(config: EmbedderConfig, factory: EmbedderFactory) -> Mailbox<EmbedderMsg> {
    let info = ActorDirectory::default().entry(ActorKind::EmbedderPool, "pool");
    let (actor, _) = Actor::spawn(
        None,
        EmbedderPool,
        EmbedderPoolArgs {
            factory,
            config,
            info: info.clone(),
        },
    )
    .await
    .unwrap();
    Mailbox::new(actor, info)
}

/// The vectors of `texts`, asked as a query or as background work.
async fn vectors(
    pool: &Mailbox<EmbedderMsg>,
    texts: Vec<String>,
    background: bool,
) -> MemoryResult<Embeddings> {
    pool.ask(
        |reply| {
            let reply = JobReply::Vectors(reply);
            if background {
                EmbedderMsg::EmbedBackground { texts, reply }
            } else {
                EmbedderMsg::Embed { texts, reply }
            }
        },
        Duration::from_secs(5),
        "embedder",
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn concurrent_requests_get_their_own_vectors_back() {
    let pool = pool(8, 1000).await;
    let mut expected = HashingEmbedder::default();
    let requests: Vec<Vec<String>> = (0..20)
        .map(|i| (0..(i % 3 + 1)).map(|j| format!("text {i} {j}")).collect())
        .collect();
    let answers = futures::future::join_all(
        requests
            .iter()
            .map(|texts| async { vectors(&pool, texts.clone(), false).await.unwrap() }),
    )
    .await;
    for (texts, got) in requests.iter().zip(answers) {
        assert_eq!(got, expected.embed(texts).unwrap());
    }
}

#[tokio::test]
async fn a_full_queue_refuses_at_once() {
    let pool = pool(1, 1).await;
    let texts: Vec<String> = vec!["a".into(), "b".into()];
    let err = vectors(&pool, texts, false).await.unwrap_err();
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
    measured(pool, Question::Text(query.to_owned()), passages).await
}

async fn measured(
    pool: &Mailbox<EmbedderMsg>,
    question: Question,
    passages: Vec<Passage>,
) -> MemoryResult<Vec<f32>> {
    pool.ask(
        |reply| EmbedderMsg::LateInteraction {
            question,
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
                reply: JobReply::Vectors(reply),
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
        Question::Text("the pottery class?".into()),
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
            |reply| EmbedderMsg::EmbedBackground {
                texts: sent,
                reply: JobReply::Sketched(reply),
            },
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
            question: Question::Text("abandoned".into()),
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

/// A query embedded as a question gets its vector (the same as without) and the question
/// its token vectors make, from one request.
#[tokio::test]
async fn questions_come_back_with_their_vectors() {
    let pool = pool(8, 1000).await;
    let texts: Vec<String> = vec!["the pottery class?".into(), "quantum".into()];
    let sent = texts.clone();
    let questions = pool
        .ask(
            |reply| EmbedderMsg::Embed {
                texts: sent,
                reply: JobReply::Questions(reply),
            },
            Duration::from_secs(5),
            "embedder",
        )
        .await
        .unwrap()
        .unwrap();
    let mut expected = HashingEmbedder::default();
    let tokens = expected.token_vectors(&texts).unwrap();
    assert_eq!(
        questions.iter().map(|(v, _)| v.clone()).collect::<Vec<_>>(),
        expected.embed(&texts).unwrap()
    );
    for ((_, question), tokens) in questions.iter().zip(&tokens) {
        assert_eq!(question, &SketchQuery::new(tokens));
    }
}

/// A question that comes ready is not read by the model again: only the passages given as
/// text are, and every passage measures as it would against the question read from text.
/// With every passage stored, the measure needs no model (`measure_sketches`).
#[tokio::test]
async fn a_ready_question_is_not_read_again() {
    let read = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let pool = counting_pool(read.clone()).await;
    let mut model = HashingEmbedder::default();
    let question = Arc::new(SketchQuery::new(
        &model.token_vectors(&["the pottery class?".into()]).unwrap()[0],
    ));
    let sketch_of = |text: &str| {
        HashingEmbedder::default()
            .embed_with_sketches(&[text.to_owned()])
            .unwrap()
            .remove(0)
            .1
    };
    let stored = |text: &str| Passage::Sketch(sketch_of(text));
    let passages = vec![
        stored("she took a pottery class"),
        Passage::Text("a pottery fair".into()),
        Passage::Text("quantum flux".into()),
    ];
    let ready = measured(&pool, Question::Ready(question.clone()), passages.clone())
        .await
        .unwrap();
    assert_eq!(
        read.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "the two passages given as text, not the question"
    );
    let from_text = measured(&pool, Question::Text("the pottery class?".into()), passages)
        .await
        .unwrap();
    assert_eq!(ready, from_text);

    let all_stored = [
        sketch_of("she took a pottery class"),
        sketch_of("a pottery fair"),
        sketch_of("quantum flux"),
    ];
    let alone = all_stored.iter().map(|s| (s.as_slice(), Vec::new()));
    assert_eq!(measure_sketches(&question, alone, 0.7), ready);
}

/// An embedder that takes a while and records how many texts each call had.
struct Recording(HashingEmbedder, Arc<std::sync::Mutex<Vec<usize>>>);

impl Embedder for Recording {
    fn info(&self) -> &ModelInfo {
        self.0.info()
    }
    fn embed(&mut self, texts: &[String]) -> Result<Embeddings, EmbedError> {
        std::thread::sleep(Duration::from_millis(30));
        self.1.lock().unwrap().push(texts.len());
        self.0.embed(texts)
    }
    fn token_vectors(
        &mut self,
        texts: &[String],
    ) -> Result<Vec<crate::embedder::TokenVectors>, EmbedError> {
        self.0.token_vectors(texts)
    }
}

/// The sizes of the batches one worker ran for twelve one-text requests sent at once, as
/// queries or as background work, with batches of 8 and background batches of 2.
async fn batch_sizes(background: bool) -> Vec<usize> {
    let sizes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorded = sizes.clone();
    let mut config = config(8, 1000);
    config.background_batch = NonZeroUsize::new(2).unwrap();
    let pool = spawned(
        config,
        Arc::new(move || {
            Ok(
                Box::new(Recording(HashingEmbedder::default(), recorded.clone()))
                    as Box<dyn Embedder>,
            )
        }),
    )
    .await;
    // The worker's warm-up text at start is not one of the requests.
    tokio::time::sleep(Duration::from_millis(100)).await;
    sizes.lock().unwrap().clear();
    let requests = (0..12).map(|i| vectors(&pool, vec![format!("text {i}")], background));
    for answer in futures::future::join_all(requests).await {
        answer.unwrap();
    }
    let sizes = sizes.lock().unwrap().clone();
    assert_eq!(sizes.iter().sum::<usize>(), 12, "{sizes:?}");
    sizes
}

/// Background work fills a batch only up to `background_batch` texts, so that a query that
/// comes while it runs waits for a short one; queries still batch up to `max_batch`.
#[tokio::test]
async fn background_batches_are_kept_short_and_queries_are_not() {
    let background = batch_sizes(true).await;
    assert!(background.iter().all(|&n| n <= 2), "{background:?}");
    let queries = batch_sizes(false).await;
    assert!(queries.iter().any(|&n| n > 2), "{queries:?}");
}
