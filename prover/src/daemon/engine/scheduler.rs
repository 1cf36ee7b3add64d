//! Which device proves the next partition: the one that will finish it
//! first, by each device's measured time for that kind of partition.
//!
//! A free device worker asks [`Scheduler::decide`] before it takes the
//! head of the ready queue. The scheduler plays the queue forward (each
//! waiting partition goes to the device predicted to finish it first,
//! counting what every device is running now) and lets the worker take
//! the head only when its device gets one of the waiting partitions. So a
//! slower device still helps with a backlog, but does not take a job's
//! last partition from a faster device about to be free. Devices without
//! a measurement yet always take work: that is how they get one.
//!
//! [`DeviceQueue`] is the ready queue itself, with the scheduler inside its
//! lock; time there is milliseconds since the queue was made.

use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Weight of the newest measurement in a device's running estimate.
const EWMA_WEIGHT: f64 = 0.3;
/// Longest a declining worker sleeps before it looks again (a push, a
/// finish or a close wakes it sooner).
const MAX_NAP_MS: f64 = 100.0;

/// What a free worker of a device should do now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decision {
    Take,
    /// Another device will finish everything waiting sooner: look again
    /// after this many milliseconds (or when woken).
    Wait(f64),
    /// The device is out of rotation: the worker stops.
    Exit,
}

#[derive(Debug, Clone)]
struct Running {
    id: u64,
    started: f64,
    estimate: Option<f64>,
}

#[derive(Debug, Clone)]
struct Slots {
    workers: u32,
    running: Vec<Running>,
    healthy: bool,
}

/// The scheduling state of every device: workers, what they run, and the
/// measured time per kind of partition.
#[derive(Debug, Clone)]
pub struct Scheduler<K> {
    devices: Vec<Slots>,
    estimates: HashMap<(usize, K), f64>,
    next_id: u64,
}

impl<K: Eq + Hash + Clone> Scheduler<K> {
    /// Devices with these many workers each (0: out of rotation from the start).
    pub fn new(workers: &[u32]) -> Self {
        Scheduler {
            devices: workers
                .iter()
                .map(|&w| Slots {
                    workers: w,
                    running: Vec::new(),
                    healthy: w > 0,
                })
                .collect(),
            estimates: HashMap::new(),
            next_id: 0,
        }
    }

    pub fn estimate(&self, d: usize, key: &K) -> Option<f64> {
        self.estimates.get(&(d, key.clone())).copied()
    }

    pub fn healthy(&self, d: usize) -> bool {
        self.devices.get(d).is_some_and(|s| s.healthy)
    }

    pub fn healthy_count(&self) -> usize {
        self.devices.iter().filter(|s| s.healthy).count()
    }

    /// Takes device `d` out of rotation.
    pub fn fail(&mut self, d: usize) {
        if let Some(s) = self.devices.get_mut(d) {
            s.healthy = false;
        }
    }

    /// What device `d`'s free worker should do at `now` with `queue` (the
    /// waiting partitions' keys, oldest first) waiting.
    pub fn decide(&self, d: usize, now: f64, queue: &[K]) -> Decision {
        if !self.healthy(d) {
            return Decision::Exit;
        }
        let Some(head) = queue.first() else {
            return Decision::Wait(MAX_NAP_MS);
        };
        if self.estimate(d, head).is_none() {
            return Decision::Take;
        }
        // When each device's workers are next free: now for an idle
        // worker (the asking one included), else the predicted end of
        // what it runs.
        let mut free: Vec<(usize, Vec<f64>)> = Vec::new();
        for (o, s) in self.devices.iter().enumerate().filter(|(_, s)| s.healthy) {
            let mut at: Vec<f64> = s.running.iter().map(|r| now + remaining(r, now)).collect();
            at.resize(s.workers.max(1) as usize, now);
            if o == d {
                // The asking worker is free whatever the slots say.
                if let Some(last) = at.iter_mut().max_by(|a, b| a.total_cmp(b)) {
                    *last = now;
                }
            }
            free.push((o, at));
        }
        for key in queue {
            let mut best: Option<(f64, usize, usize)> = None;
            for (i, (o, at)) in free.iter().enumerate() {
                let Some(e) = self.estimate(*o, key).or_else(|| self.mean_estimate(key)) else {
                    continue;
                };
                let (slot, start) = at
                    .iter()
                    .copied()
                    .enumerate()
                    .min_by(|a, b| a.1.total_cmp(&b.1))
                    .unwrap_or((0, now));
                let finish = start + e;
                // Ties go to the asking device: it is free now.
                let better = match best {
                    None => true,
                    Some((f, _, _)) => finish < f - 1e-9 || (finish <= f + 1e-9 && *o == d),
                };
                if better {
                    best = Some((finish, i, slot));
                }
            }
            let Some((finish, i, slot)) = best else {
                return Decision::Take;
            };
            if free[i].0 == d {
                return Decision::Take;
            }
            free[i].1[slot] = finish;
        }
        // Every waiting partition goes elsewhere: look again when the next
        // of the others' running partitions is predicted to end.
        let next = self
            .devices
            .iter()
            .enumerate()
            .filter(|(o, s)| *o != d && s.healthy)
            .flat_map(|(_, s)| s.running.iter().map(|r| remaining(r, now)))
            .fold(MAX_NAP_MS, f64::min);
        Decision::Wait(next.clamp(1.0, MAX_NAP_MS))
    }

    fn mean_estimate(&self, key: &K) -> Option<f64> {
        let known: Vec<f64> = (0..self.devices.len())
            .filter_map(|o| self.estimate(o, key))
            .collect();
        (!known.is_empty()).then(|| known.iter().sum::<f64>() / known.len() as f64)
    }

    /// Device `d` starts a partition of `key` at `now`; returns its ticket.
    pub fn start(&mut self, d: usize, key: &K, now: f64) -> u64 {
        self.next_id += 1;
        let estimate = self.estimate(d, key);
        if let Some(s) = self.devices.get_mut(d) {
            s.running.push(Running {
                id: self.next_id,
                started: now,
                estimate,
            });
        }
        self.next_id
    }

    /// The partition of ticket `id` ended at `now`; a measured duration
    /// (`ok`) updates the device's estimate for `key`.
    pub fn finish(&mut self, d: usize, id: u64, key: &K, now: f64, ok: bool) {
        let Some(s) = self.devices.get_mut(d) else {
            return;
        };
        let Some(pos) = s.running.iter().position(|r| r.id == id) else {
            return;
        };
        let r = s.running.swap_remove(pos);
        if ok {
            let took = (now - r.started).max(0.0);
            self.estimates
                .entry((d, key.clone()))
                .and_modify(|e| *e = (1.0 - EWMA_WEIGHT) * *e + EWMA_WEIGHT * took)
                .or_insert(took);
        }
    }
}

/// Predicted time left of a running partition. Past its estimate, it is
/// assumed to need as long again as it overran, so a device that hangs
/// looks ever less attractive instead of forever about to be free.
fn remaining(r: &Running, now: f64) -> f64 {
    let elapsed = now - r.started;
    match r.estimate {
        Some(e) if elapsed <= e => e - elapsed,
        Some(e) => elapsed - e,
        None => elapsed,
    }
}

/// A partition a device worker took, to hand back to [`DeviceQueue::finish`].
#[derive(Debug)]
pub struct Lease<K> {
    pub device: usize,
    key: K,
    id: u64,
}

struct State<K, T> {
    items: VecDeque<(K, T)>,
    closed: bool,
    sched: Scheduler<K>,
}

/// The ready queue between synthesis and the devices.
pub struct DeviceQueue<K, T> {
    state: Mutex<State<K, T>>,
    changed: Condvar,
    origin: Instant,
}

impl<K: Eq + Hash + Clone, T> DeviceQueue<K, T> {
    pub fn new(workers: &[u32]) -> Self {
        DeviceQueue {
            state: Mutex::new(State {
                items: VecDeque::new(),
                closed: false,
                sched: Scheduler::new(workers),
            }),
            changed: Condvar::new(),
            origin: Instant::now(),
        }
    }

    fn now(&self) -> f64 {
        self.origin.elapsed().as_secs_f64() * 1e3
    }

    /// Queues a partition; handed back when no device can take it (closed,
    /// or every device out of rotation).
    pub fn push(&self, key: K, item: T) -> Result<(), T> {
        self.put(key, item, false)
    }

    /// Queues a partition ahead of the others (a retry after its device failed).
    pub fn push_front(&self, key: K, item: T) -> Result<(), T> {
        self.put(key, item, true)
    }

    fn put(&self, key: K, item: T, front: bool) -> Result<(), T> {
        let mut s = self.state.lock();
        if s.closed || s.sched.healthy_count() == 0 {
            return Err(item);
        }
        match front {
            true => s.items.push_front((key, item)),
            false => s.items.push_back((key, item)),
        }
        drop(s);
        self.changed.notify_all();
        Ok(())
    }

    /// No more pushes; workers finish what is queued, then stop.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.changed.notify_all();
    }

    /// Blocks until device `d` should take a partition; `None` when the
    /// queue is closed and empty, or the device is out of rotation.
    pub fn take(&self, d: usize) -> Option<(Lease<K>, T)> {
        let mut s = self.state.lock();
        loop {
            if s.items.is_empty() && s.closed {
                return None;
            }
            let keys: Vec<K> = s.items.iter().map(|(k, _)| k.clone()).collect();
            let now = self.now();
            match s.sched.decide(d, now, &keys) {
                Decision::Exit => return None,
                Decision::Take => {
                    let (key, item) = s.items.pop_front()?;
                    let id = s.sched.start(d, &key, now);
                    return Some((Lease { device: d, key, id }, item));
                }
                Decision::Wait(ms) => {
                    let nap = Duration::from_secs_f64(ms.clamp(1.0, MAX_NAP_MS) / 1e3);
                    let _ = self.changed.wait_for(&mut s, nap);
                }
            }
        }
    }

    /// The leased partition is done; `ok` when its duration is a fair
    /// measurement of the device (it finished normally).
    pub fn finish(&self, lease: Lease<K>, ok: bool) {
        let now = self.now();
        self.state
            .lock()
            .sched
            .finish(lease.device, lease.id, &lease.key, now, ok);
        self.changed.notify_all();
    }

    /// Takes device `d` out of rotation. When no device is left, the
    /// waiting partitions are handed back (to be failed).
    pub fn fail_device(&self, d: usize) -> Vec<T> {
        let mut s = self.state.lock();
        s.sched.fail(d);
        let orphans = match s.sched.healthy_count() {
            0 => s.items.drain(..).map(|(_, t)| t).collect(),
            _ => Vec::new(),
        };
        drop(s);
        self.changed.notify_all();
        orphans
    }

    pub fn healthy_devices(&self) -> usize {
        self.state.lock().sched.healthy_count()
    }

    /// Partitions waiting for a device now.
    pub fn waiting(&self) -> usize {
        self.state.lock().items.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A discrete-event run of `n` identical partitions, all queued at 0,
    /// on devices taking `ms[d]` each, one worker each, starting from the
    /// scheduler's state `s`. Returns the makespan and partitions per device.
    fn simulate(
        s: &mut Scheduler<u8>,
        ms: &[f64],
        n: usize,
        always_take: bool,
    ) -> (f64, Vec<usize>) {
        let mut queue = vec![0u8; n];
        let mut busy: Vec<Option<(u64, f64)>> = vec![None; ms.len()];
        let mut per = vec![0; ms.len()];
        let mut now = 0.0;
        let mut end: f64 = 0.0;
        for _ in 0..10_000 {
            // Every free device asks, lowest index first.
            let mut took = false;
            for d in 0..ms.len() {
                if busy[d].is_some() || queue.is_empty() {
                    continue;
                }
                let take = always_take || s.decide(d, now, &queue) == Decision::Take;
                if take {
                    queue.remove(0);
                    busy[d] = Some((s.start(d, &0, now), now + ms[d]));
                    per[d] += 1;
                    took = true;
                }
            }
            if took {
                continue;
            }
            // Advance to the next finish.
            let Some((d, (id, at))) = busy
                .iter()
                .enumerate()
                .filter_map(|(d, b)| b.map(|b| (d, b)))
                .min_by(|a, b| a.1 .1.total_cmp(&b.1 .1))
            else {
                break;
            };
            now = at;
            end = end.max(at);
            s.finish(d, id, &0, now, true);
            busy[d] = None;
        }
        assert!(queue.is_empty(), "the simulation ran out of steps");
        (end, per)
    }

    /// A scheduler that has measured each device once at its true speed.
    fn warmed(ms: &[f64]) -> Scheduler<u8> {
        let mut s = Scheduler::new(&vec![1; ms.len()]);
        for (d, m) in ms.iter().enumerate() {
            let id = s.start(d, &0, 0.0);
            s.finish(d, id, &0, *m, true);
        }
        s
    }

    #[test]
    fn a_slow_device_helps_with_a_backlog_but_leaves_the_tail_to_the_fast_one() {
        // 10 partitions, devices of 10 and 30 ms: the best split is 8 + 2
        // (80 ms); taking whatever comes gives the slow device a third
        // partition and ends at 90 ms.
        let ms = [10.0, 30.0];
        let (pull, pull_split) = simulate(&mut warmed(&ms), &ms, 10, true);
        assert_eq!((pull, pull_split), (90.0, vec![7, 3]));
        let (makespan, split) = simulate(&mut warmed(&ms), &ms, 10, false);
        assert_eq!((makespan, split), (80.0, vec![8, 2]));
    }

    #[test]
    fn equal_devices_share_the_work_evenly() {
        let ms = [20.0, 20.0, 20.0, 20.0];
        let (makespan, split) = simulate(&mut warmed(&ms), &ms, 16, false);
        assert_eq!((makespan, split), (80.0, vec![4, 4, 4, 4]));
    }

    #[test]
    fn a_much_slower_device_is_left_idle_when_it_would_only_delay() {
        // A CPU-speed device beside a GPU: 5 partitions of 10 ms on the fast
        // one end at 50 ms; the slow one would need 1000 ms for one.
        let ms = [10.0, 1000.0];
        let (makespan, split) = simulate(&mut warmed(&ms), &ms, 5, false);
        assert_eq!((makespan, split), (50.0, vec![5, 0]));
    }

    #[test]
    fn devices_without_a_measurement_take_work_and_get_one() {
        let mut s: Scheduler<u8> = Scheduler::new(&[1, 1]);
        assert_eq!(s.decide(1, 0.0, &[0]), Decision::Take);
        let id = s.start(1, &0, 0.0);
        s.finish(1, id, &0, 12.0, true);
        assert_eq!(s.estimate(1, &0), Some(12.0));
        // A failed partition is no measurement of the device.
        let id = s.start(1, &0, 20.0);
        s.finish(1, id, &0, 1000.0, false);
        assert_eq!(s.estimate(1, &0), Some(12.0));
        let id = s.start(1, &0, 0.0);
        s.finish(1, id, &0, 22.0, true);
        assert!((s.estimate(1, &0).expect("estimate") - 15.0).abs() < 1e-9);
        // Another kind of partition is not known yet.
        assert_eq!(s.estimate(1, &1), None);
        assert_eq!(s.decide(1, 0.0, &[1]), Decision::Take);
    }

    #[test]
    fn a_failed_device_never_takes_and_a_hung_one_stops_attracting_work() {
        let mut s = warmed(&[10.0, 30.0]);
        // Device 0 is busy with a partition due at 10 ms: device 1 (30 ms)
        // waits for it rather than take the only partition.
        let id = s.start(0, &0, 0.0);
        assert!(matches!(s.decide(1, 1.0, &[0]), Decision::Wait(ms) if (1.0..=9.0).contains(&ms)));
        // Far past its estimate, device 0 is assumed to need as long again:
        // at 50 ms it overran by 40, so device 1 (done at 80) takes it.
        assert_eq!(s.decide(1, 50.0, &[0]), Decision::Take);
        s.finish(0, id, &0, 50.0, false);
        s.fail(0);
        assert_eq!(s.decide(0, 60.0, &[0]), Decision::Exit);
        assert_eq!(s.decide(1, 60.0, &[0]), Decision::Take);
        assert_eq!(s.healthy_count(), 1);
        // Devices with no workers are out of rotation from the start.
        let s: Scheduler<u8> = Scheduler::new(&[0, 1]);
        assert_eq!(s.decide(0, 0.0, &[0]), Decision::Exit);
    }

    #[test]
    fn the_queue_hands_work_to_threads_and_stops_them_at_close() {
        let q: Arc<DeviceQueue<u8, u32>> = Arc::new(DeviceQueue::new(&[1, 1]));
        let workers: Vec<_> = (0..2)
            .map(|d| {
                let q = q.clone();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while let Some((lease, item)) = q.take(d) {
                        got.push(item);
                        q.finish(lease, true);
                    }
                    got
                })
            })
            .collect();
        for i in 0..20 {
            q.push(0, i).expect("open");
        }
        q.close();
        assert_eq!(q.push(0, 99), Err(99));
        let mut all: Vec<u32> = workers
            .into_iter()
            .flat_map(|w| w.join().expect("worker"))
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..20).collect::<Vec<_>>());
    }

    #[test]
    fn when_the_last_device_fails_the_waiting_work_is_handed_back() {
        let q: DeviceQueue<u8, u32> = DeviceQueue::new(&[1, 1]);
        q.push(0, 1).expect("open");
        q.push_front(0, 0).expect("open");
        assert!(q.fail_device(0).is_empty());
        assert_eq!(q.healthy_devices(), 1);
        assert!(q.take(0).is_none(), "a failed device's worker stops");
        let (lease, first) = q.take(1).expect("the retry comes first");
        assert_eq!(first, 0);
        q.finish(lease, true);
        assert_eq!(q.fail_device(1), vec![1]);
        assert_eq!(q.push(0, 2), Err(2), "no device left to take it");
    }
}
