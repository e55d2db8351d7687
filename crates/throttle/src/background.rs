//! Background classes: work the tier does for itself (the scrubber; later the garbage
//! collector), served only from capacity the tenants leave unused.
//!
//! # Rules
//!
//! - **Lowest priority, work-conserving.** The dispatcher asks the background classes only
//!   when the tier has room (the same lookahead as tenants' grants) and dmClock has nothing
//!   to dispatch: no tenant has a request queued, or every tenant holding one is at its limit.
//!   A background grant is therefore never ahead of a tenant's reservation or weight share;
//!   a tenant's request that arrives while a background grain is booked waits for at most
//!   that grain plus the lookahead, exactly as it would behind a neighbour's grain.
//! - **Capped.** A class never gets more than its own rate, in bytes per second, over any
//!   window: a grant of `b` bytes at `now` moves the class's next permitted grant to
//!   `max(ready_at, now) + b / rate`. No credit builds up while tenants keep it waiting, so a
//!   class that was starved does not burst when the tier frees up.
//! - **Fair among classes.** Several eligible classes are served round-robin.
//!
//! Pure logic with time as an input (`Duration` since the dispatcher's epoch); the
//! dispatcher owns one [`Classes`].

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// A background class's id, allocated by the handle that owns it.
pub(crate) type ClassId = u64;

/// One admission waiting in a background class.
#[derive(Debug)]
pub(crate) struct Waiting<T> {
    pub class: ClassId,
    /// Bytes the admission moves (what the class's rate caps).
    pub bytes: u64,
    /// What it costs the tier, in the scheduler's units (an operation plus its bytes).
    pub cost: u64,
    pub payload: T,
}

/// What the background classes can do now.
#[derive(Debug)]
pub(crate) enum Pop<T> {
    /// Grant this one now.
    Grant(Waiting<T>),
    /// Admissions are waiting but every class holding one is at its rate until then.
    NextAt(Duration),
    /// Nothing is waiting.
    Empty,
}

#[derive(Debug)]
struct Class<T> {
    /// Bytes per second at most; `None`: no cap of its own.
    rate: Option<f64>,
    /// The earliest time of its next grant.
    ready_at: Duration,
    queue: VecDeque<Waiting<T>>,
}

/// Every background class of one dispatcher.
#[derive(Debug)]
pub(crate) struct Classes<T> {
    classes: BTreeMap<ClassId, Class<T>>,
    /// Round-robin: the search for the next grant starts at this id.
    turn: ClassId,
}

impl<T> Default for Classes<T> {
    fn default() -> Self {
        Self {
            classes: BTreeMap::new(),
            turn: 0,
        }
    }
}

/// How long `bytes` take at `rate` bytes per second.
fn spacing(bytes: u64, rate: Option<f64>) -> Duration {
    match rate {
        Some(r) => Duration::from_secs_f64(bytes as f64 / r),
        None => Duration::ZERO,
    }
}

impl<T> Classes<T> {
    /// Adds (or re-rates) class `id`.
    pub fn add(&mut self, id: ClassId, rate: Option<f64>) {
        self.classes
            .entry(id)
            .and_modify(|c| c.rate = rate)
            .or_insert(Class {
                rate,
                ready_at: Duration::ZERO,
                queue: VecDeque::new(),
            });
    }

    /// Changes a class's cap, effective from its next grant. Returns whether it exists.
    pub fn set_rate(&mut self, id: ClassId, rate: Option<f64>, now: Duration) -> bool {
        match self.classes.get_mut(&id) {
            Some(c) => {
                // The spacing already booked was at the old rate: a faster rate should not
                // wait it out, a slower one starts from now.
                if rate.is_none() || c.rate.is_some_and(|old| rate.is_some_and(|r| r > old)) {
                    c.ready_at = c.ready_at.min(now);
                }
                c.rate = rate;
                true
            }
            None => false,
        }
    }

    /// Removes a class; what it had waiting is returned (dropping it refuses the waiters).
    pub fn remove(&mut self, id: ClassId) -> Vec<Waiting<T>> {
        self.classes
            .remove(&id)
            .map(|c| c.queue.into_iter().collect())
            .unwrap_or_default()
    }

    /// Queues an admission; `false` (and the payload back) when the class does not exist.
    pub fn enqueue(&mut self, w: Waiting<T>) -> Result<(), Waiting<T>> {
        match self.classes.get_mut(&w.class) {
            Some(c) => {
                c.queue.push_back(w);
                Ok(())
            }
            None => Err(w),
        }
    }

    /// The next grant if a class may have one at `now`: the first eligible class from the
    /// round-robin turn, whose next permitted grant then moves by its rate.
    pub fn pop(&mut self, now: Duration) -> Pop<T> {
        let mut next_at: Option<Duration> = None;
        let ids: Vec<ClassId> = self
            .classes
            .range(self.turn..)
            .chain(self.classes.range(..self.turn))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            let Some(c) = self.classes.get_mut(&id) else {
                continue;
            };
            if c.queue.is_empty() {
                continue;
            }
            if c.ready_at > now {
                next_at = Some(next_at.map_or(c.ready_at, |t| t.min(c.ready_at)));
                continue;
            }
            let Some(w) = c.queue.pop_front() else {
                continue;
            };
            c.ready_at = c.ready_at.max(now) + spacing(w.bytes, c.rate);
            self.turn = id.wrapping_add(1);
            return Pop::Grant(w);
        }
        match next_at {
            Some(t) => Pop::NextAt(t),
            None => Pop::Empty,
        }
    }

    /// Gives a class back the spacing of a grant its caller gave up.
    pub fn refund(&mut self, id: ClassId, bytes: u64) {
        if let Some(c) = self.classes.get_mut(&id) {
            c.ready_at = c.ready_at.saturating_sub(spacing(bytes, c.rate));
        }
    }

    /// How many admissions wait in every class.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.classes.values().map(|c| c.queue.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(class: ClassId, bytes: u64, payload: u32) -> Waiting<u32> {
        Waiting {
            class,
            bytes,
            cost: bytes,
            payload,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_class_is_held_to_its_rate_without_credit() {
        let mut c = Classes::default();
        c.add(1, Some(1000.0)); // 1,000 bytes a second
        for i in 0..3 {
            c.enqueue(w(1, 100, i)).expect("class exists");
        }
        // The first goes at once, the next 100 ms later (100 bytes at 1,000 B/s).
        assert!(matches!(c.pop(ms(0)), Pop::Grant(g) if g.payload == 0));
        assert!(matches!(c.pop(ms(50)), Pop::NextAt(t) if t == ms(100)));
        assert!(matches!(c.pop(ms(100)), Pop::Grant(g) if g.payload == 1));
        // Kept waiting for a second (the tenants were busy): still one grant, then spacing.
        assert!(matches!(c.pop(ms(1100)), Pop::Grant(g) if g.payload == 2));
        c.enqueue(w(1, 100, 3)).expect("class exists");
        assert!(matches!(c.pop(ms(1100)), Pop::NextAt(t) if t == ms(1200)));
        assert!(matches!(c.pop(ms(1200)), Pop::Grant(g) if g.payload == 3));
        assert!(matches!(c.pop(ms(1200)), Pop::Empty));
    }

    #[test]
    fn without_a_rate_every_admission_may_go() {
        let mut c = Classes::default();
        c.add(7, None);
        for i in 0..4 {
            c.enqueue(w(7, 1 << 20, i)).expect("class exists");
        }
        for i in 0..4 {
            assert!(matches!(c.pop(ms(0)), Pop::Grant(g) if g.payload == i));
        }
        assert!(matches!(c.pop(ms(0)), Pop::Empty));
    }

    #[test]
    fn classes_take_turns() {
        let mut c = Classes::default();
        c.add(1, None);
        c.add(2, None);
        for i in 0..3 {
            c.enqueue(w(1, 1, 10 + i)).expect("class 1");
            c.enqueue(w(2, 1, 20 + i)).expect("class 2");
        }
        let order: Vec<u32> = (0..6)
            .map(|_| match c.pop(ms(0)) {
                Pop::Grant(g) => g.payload,
                other => panic!("expected a grant, got {other:?}"),
            })
            .collect();
        assert_eq!(order, [10, 20, 11, 21, 12, 22]);
    }

    #[test]
    fn a_faster_rate_applies_at_once_and_a_refund_returns_the_spacing() {
        let mut c = Classes::default();
        c.add(1, Some(100.0));
        c.enqueue(w(1, 100, 0)).expect("class exists");
        c.enqueue(w(1, 100, 1)).expect("class exists");
        assert!(matches!(c.pop(ms(0)), Pop::Grant(_)));
        assert!(matches!(c.pop(ms(10)), Pop::NextAt(t) if t == ms(1000)));
        assert!(c.set_rate(1, Some(10_000.0), ms(10)));
        assert!(matches!(c.pop(ms(10)), Pop::Grant(g) if g.payload == 1));
        // 100 bytes at 10,000 B/s: 10 ms; refunded, the next may go at once.
        c.refund(1, 100);
        c.enqueue(w(1, 100, 2)).expect("class exists");
        assert!(matches!(c.pop(ms(10)), Pop::Grant(g) if g.payload == 2));
        // A slower rate does not shorten what is booked.
        assert!(c.set_rate(1, Some(1.0), ms(10)));
        c.enqueue(w(1, 1, 3)).expect("class exists");
        assert!(matches!(c.pop(ms(15)), Pop::NextAt(t) if t == ms(20)));
        assert!(!c.set_rate(9, None, ms(0)));
    }

    #[test]
    fn a_removed_class_hands_back_its_waiters_and_refuses_more() {
        let mut c = Classes::default();
        c.add(1, None);
        c.enqueue(w(1, 1, 0)).expect("class exists");
        assert_eq!(c.len(), 1);
        assert_eq!(c.remove(1).len(), 1);
        assert!(c.enqueue(w(1, 1, 1)).is_err());
        assert_eq!(c.len(), 0);
        assert!(matches!(c.pop(ms(0)), Pop::Empty));
    }
}
