//! Taking a Python object off the cyclic garbage collector's lists while it can hold no cycle,
//! and putting it back once it can.
//!
//! CPython does this itself for tuples and dicts that hold only atomic values: an object the
//! collector tracks is walked at every collection of its generation, and a million waiting
//! futures walked again and again were close to half of `produce_future`'s time. Untracking is
//! memory-safe at any time (the collector then treats what the object refers to as referenced
//! from outside); its only cost is that a reference cycle through an untracked object is never
//! collected, so the owner of an untracked object tracks it again before it can take part in
//! one. `DeliveryFuture` is the one caller from Python (see `ferrokafka._delivery_future`); a
//! `Message` never holds a Python object, so `PyMessage::into_untracked` untracks each one as it
//! is made, directly and without these checks, on the consumer's and producer's hot paths.

use pyo3::ffi;
use pyo3::prelude::*;

use crate::errors::invalid_argument;

/// Puts `object` on the collector's lists or takes it off, if it is not there already. Objects
/// of types the collector does not know are refused: their memory has no collector header.
fn set_tracked(object: &Bound<'_, PyAny>, tracked: bool) -> PyResult<()> {
    // SAFETY: `PyType_GetFlags` reads a live type object's flags.
    let flags = unsafe { ffi::PyType_GetFlags(object.get_type().as_type_ptr()) };
    if flags & ffi::Py_TPFLAGS_HAVE_GC == 0 {
        return Err(invalid_argument(format!(
            "{} objects are not tracked by the garbage collector",
            object.get_type().name()?
        )));
    }
    let pointer = object.as_ptr();
    // SAFETY: a live object of a GC type, with the GIL held, so checking and changing are one
    // step for every other thread; tracking an object already tracked would abort the process,
    // which the check rules out.
    unsafe {
        match (ffi::PyObject_GC_IsTracked(pointer) == 1, tracked) {
            (true, false) => ffi::PyObject_GC_UnTrack(pointer.cast()),
            (false, true) => ffi::PyObject_GC_Track(pointer.cast()),
            _ => {}
        }
    }
    Ok(())
}

/// Takes `object` off the garbage collector's lists (no-op if it is off them); its type must be
/// one the collector tracks. The caller tracks it again ([`gc_track`]) before it can be part of
/// a reference cycle.
#[pyfunction]
pub fn gc_untrack(object: &Bound<'_, PyAny>) -> PyResult<()> {
    set_tracked(object, false)
}

/// Puts `object` back on the garbage collector's lists (no-op if it is on them).
#[pyfunction]
pub fn gc_track(object: &Bound<'_, PyAny>) -> PyResult<()> {
    set_tracked(object, true)
}
