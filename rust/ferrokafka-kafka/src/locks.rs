//! [`lock`]: the engines' one way to take a mutex; [`wait_timeout`]: their one way to take it
//! back after waiting on a condition variable.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Locks `mutex`, also when a panic poisoned it: every critical section in the engines leaves
/// its data consistent at each step, so serving on is better than failing every later call.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits on `condvar` for at most `timeout`, taking the mutex of `guard` back also when a
/// panic poisoned it (as [`lock`] does).
pub(crate) fn wait_timeout<'a, T>(
    condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
) -> MutexGuard<'a, T> {
    condvar
        .wait_timeout(guard, timeout)
        .unwrap_or_else(|p| p.into_inner())
        .0
}
