//! Every call of a run in due order: each arrival of the schedule brings one call, or a
//! session's calls at fixed delays after it, all due at times fixed when they are drawn.
//! Calls due after the duration are not made.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use rand::rngs::SmallRng;

use super::arrival::Schedule;
use super::workload::{Call, Workload};

/// A drawn call waiting for its time.
struct Due {
    at: f64,
    /// Draw order: calls due at the same time go in the order they were drawn.
    seq: u64,
    call: Call,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> Ordering {
        self.at.total_cmp(&other.at).then(self.seq.cmp(&other.seq))
    }
}

pub struct Timetable {
    schedule: Schedule,
    workload: Workload,
    duration: f64,
    next_arrival: Option<f64>,
    waiting: BinaryHeap<Reverse<Due>>,
    drawn: u64,
}

impl Timetable {
    pub fn new(
        mut schedule: Schedule,
        workload: Workload,
        duration: f64,
        rng: &mut SmallRng,
    ) -> Timetable {
        Timetable {
            next_arrival: schedule.next(rng),
            schedule,
            workload,
            duration,
            waiting: BinaryHeap::new(),
            drawn: 0,
        }
    }

    /// The next call due and when (seconds from the start), or `None` when none is left.
    pub fn next(&mut self, rng: &mut SmallRng) -> Option<(f64, Call)> {
        loop {
            let waiting_first = match (self.waiting.peek(), self.next_arrival) {
                (Some(Reverse(due)), Some(arrival)) => due.at <= arrival,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => return None,
            };
            if waiting_first {
                let Reverse(due) = self.waiting.pop()?;
                return Some((due.at, due.call));
            }
            let arrival = self.next_arrival?;
            self.next_arrival = self.schedule.next(rng);
            for (delay, call) in self.workload.draw(rng) {
                let at = arrival + delay;
                if at < self.duration {
                    self.drawn += 1;
                    self.waiting.push(Reverse(Due {
                        at,
                        seq: self.drawn,
                        call,
                    }));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng as _;

    use super::*;
    use crate::load::arrival::Arrival;
    use crate::load::scenario::Scenario;
    use crate::load::target::Shard;

    #[test]
    fn sessions_interleave_in_due_order_and_stop_at_the_end() {
        let scenario = Scenario::parse(
            "duration_secs = 10\narrival = { shape = \"constant\", rate = 1 }\n\
             session = { episodes = 3, think_secs = 1.5 }\n\
             mix = [{ tool = \"session\", weight = 1 }]",
        )
        .unwrap();
        let shards = vec![Shard {
            tenant: "t".into(),
            butler: "b".into(),
            key: "k".into(),
            rule_id: None,
        }];
        let mut rng = SmallRng::seed_from_u64(1);
        let workload = Workload::new(&scenario, shards, &mut rng);
        let schedule = Schedule::new(Arrival::Constant { rate: 1.0 }, 10.0);
        let mut table = Timetable::new(schedule, workload, 10.0, &mut rng);
        let times: Vec<f64> = std::iter::from_fn(|| table.next(&mut rng))
            .map(|(at, _)| at)
            .collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
        assert!(times.iter().all(|t| *t < 10.0));
        // Sessions start at 0..=9 s with calls at +0, +1.5, +3, +4.5: those starting at 0-5
        // fit whole (24 calls), then 3, 2, 2 and 1 of those starting at 6, 7, 8 and 9.
        assert_eq!(times.len(), 24 + 3 + 2 + 2 + 1, "{times:?}");
    }
}
