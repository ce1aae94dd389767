//! The one way tests wait for an effect they cannot be told about: poll a probe until it
//! says yes, for at most a timeout, and fail with what it saw last.

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

/// A condition that did not hold in time, with what the probe saw last.
pub struct TimedOut {
    pub after: Duration,
    pub last_seen: String,
}

impl fmt::Display for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "not within {:?}; last saw: {}",
            self.after, self.last_seen
        )
    }
}

// `unwrap()` and `expect()` print the Debug form: make it the readable one.
impl fmt::Debug for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for TimedOut {}

/// Polls `probe` until it answers `Ok`, for at most `timeout`. `Err` carries what the probe
/// saw, which the failure reports. Polls quickly at first, then every 100 ms.
pub async fn eventually<T, F, Fut>(timeout: Duration, mut probe: F) -> Result<T, TimedOut>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let started = Instant::now();
    let mut pause = Duration::from_millis(5);
    loop {
        match probe().await {
            Ok(value) => return Ok(value),
            Err(last_seen) if started.elapsed() >= timeout => {
                return Err(TimedOut {
                    after: timeout,
                    last_seen,
                });
            }
            Err(_) => {}
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test]
    async fn answers_once_the_probe_does() {
        let calls = AtomicU32::new(0);
        let value = eventually(Duration::from_secs(5), || async {
            match calls.fetch_add(1, Ordering::SeqCst) {
                n if n >= 3 => Ok(n),
                n => Err(format!("call {n}")),
            }
        })
        .await
        .unwrap();
        assert_eq!(value, 3);
    }

    #[tokio::test]
    async fn fails_with_what_it_last_saw() {
        let err = eventually(Duration::from_millis(30), || async {
            Err::<(), _>("still 2 rows".to_owned())
        })
        .await
        .unwrap_err();
        assert_eq!(err.last_seen, "still 2 rows");
        assert!(err.to_string().contains("last saw: still 2 rows"), "{err}");
    }
}
