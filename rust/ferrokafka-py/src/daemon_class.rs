//! `daemon_class!`: the Python face of a daemon engine (the scheduler, the redelivery tracker),
//! written once: every daemon is created, stopped, waited for, asked for its status rows and
//! for its report sample the same way, through a [`DaemonHandle`].

use std::sync::Arc;
use std::time::Duration;

use ferrokafka_core::tracking::SourceSample;
use ferrokafka_kafka::Daemon;
use pyo3::prelude::*;

use crate::blocking::{ForkGuard, TimeoutArg, wait_sliced};
use crate::engine_drops::{ReleaseOnDrop, release_gil_for};
use crate::errors::NativeError;

/// How long a daemon collected while running may take to stop.
const STOP_ON_DROP: Duration = Duration::from_secs(30);

/// A daemon (scheduler, redelivery tracker) as its pyclass holds it: waits are sliced and
/// detached, use after fork is refused, and a handle collected while the daemon runs stops it
/// (final reports, offsets committed) rather than leaving it running with nothing to stop it.
#[derive(Debug)]
pub struct DaemonHandle<S: Clone + Default + Send + Sync + std::fmt::Debug + 'static> {
    daemon: ReleaseOnDrop<Arc<Daemon<S>>>,
    guard: ForkGuard,
}

impl<S: Clone + Default + Send + Sync + std::fmt::Debug + 'static> DaemonHandle<S> {
    /// Holds `daemon`, created now in this process; `what` names its Python class in errors.
    pub fn new(daemon: Daemon<S>, what: &'static str) -> Self {
        DaemonHandle {
            daemon: ReleaseOnDrop::new(Arc::new(daemon)),
            guard: ForkGuard::new(what),
        }
    }

    /// Asks the daemon to stop; returns at once.
    pub fn request_stop(&self) -> PyResult<()> {
        self.guard.check()?;
        self.daemon.request_stop();
        Ok(())
    }

    /// Waits up to `timeout` seconds (forever when None) for the daemon to end; true once it
    /// has. A daemon that ended on its own raises the error that ended it.
    pub fn wait(&self, py: Python<'_>, timeout: Option<TimeoutArg>) -> PyResult<bool> {
        let timeout = timeout.map(|TimeoutArg(s)| s);
        self.guard.check()?;
        let daemon = &**self.daemon;
        let ended = wait_sliced(py, timeout, |slice| daemon.wait(slice).then_some(()))?;
        if let Some(failure) = daemon.failure() {
            return Err(NativeError::from(failure).into());
        }
        Ok(ended.is_some())
    }

    /// The status as of the daemon's last loop; refused in a forked child, whose copy would
    /// show the parent's as it was at the fork.
    pub fn status(&self) -> PyResult<S> {
        self.guard.check()?;
        Ok(self.daemon.status())
    }

    /// The daemon's part of a process report, as of its last loop.
    pub fn report_sample(&self) -> SourceSample {
        self.daemon.report_sample()
    }
}

impl<S: Clone + Default + Send + Sync + std::fmt::Debug + 'static> Drop for DaemonHandle<S> {
    fn drop(&mut self) {
        if !self.guard.in_creator() {
            return; // a forked child has no daemon thread to stop
        }
        let daemon = Arc::clone(&*self.daemon);
        release_gil_for(move || {
            daemon.request_stop();
            daemon.wait(STOP_ON_DROP);
        });
    }
}

/// Declares the frozen pyclass `"PythonName" RustName` of a daemon started by `start` (a
/// `fn(ClientSettings, Options) -> KafkaResult<Daemon<DaemonStatus<Row>>>`) whose Python class
/// is `public`; `status()` gives each `Row` as a `PyRow` converted by `row`.
macro_rules! daemon_class {
    (
        $(#[$meta:meta])*
        $py_name:literal $name:ident for $public:literal {
            start: $start:path,
            $(#[$status_meta:meta])*
            status: $row:ty => $py_row:ty, by $convert:path,
        }
    ) => {
        $(#[$meta])*
        #[::pyo3::pyclass(name = $py_name, module = "ferrokafka._native", frozen)]
        #[derive(Debug)]
        pub struct $name {
            daemon: $crate::daemon_class::DaemonHandle<::ferrokafka_kafka::DaemonStatus<$row>>,
        }

        #[::pyo3::pymethods]
        impl $name {
            #[new]
            #[pyo3(signature = (config, **options))]
            fn new(
                py: ::pyo3::Python<'_>,
                config: $crate::options::Config,
                options: Option<$crate::options::Keywords>,
            ) -> $crate::errors::NativeResult<Self> {
                let daemon = $crate::options::build_engine(py, config, options, $start)?;
                Ok($name {
                    daemon: $crate::daemon_class::DaemonHandle::new(daemon, $public),
                })
            }

            /// Asks the daemon to stop; returns at once.
            fn request_stop(&self) -> ::pyo3::PyResult<()> {
                self.daemon.request_stop()
            }

            /// Waits up to `timeout` seconds (forever when None) for the daemon to end; True once
            /// it has.
            #[pyo3(signature = (timeout=None))]
            fn wait(
                &self,
                py: ::pyo3::Python<'_>,
                timeout: Option<$crate::blocking::TimeoutArg>,
            ) -> ::pyo3::PyResult<bool> {
                self.daemon.wait(py, timeout)
            }

            $(#[$status_meta])*
            fn status(&self, py: ::pyo3::Python<'_>) -> ::pyo3::PyResult<Vec<$py_row>> {
                let rows = self.daemon.status()?.partitions;
                rows.into_iter().map(|row| $convert(py, row)).collect()
            }

            /// This daemon's part of a process report, as of its last loop.
            fn report_sample(&self) -> $crate::report_samples::PySourceSample {
                $crate::report_samples::PySourceSample(self.daemon.report_sample())
            }
        }
    };
}

pub(crate) use daemon_class;
