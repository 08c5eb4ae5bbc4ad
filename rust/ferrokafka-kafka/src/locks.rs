//! [`lock`]: the engines' one way to take a mutex.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, also when a panic poisoned it: every critical section in the engines leaves
/// its data consistent at each step, so serving on is better than failing every later call.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
