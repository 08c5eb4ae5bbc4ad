//! `daemon_class!`: the Python face of a daemon engine (the scheduler, the redelivery tracker),
//! written once: every daemon is created, stopped, waited for, asked for its status rows and
//! for its report sample the same way, through a [`DaemonHandle`](crate::blocking::DaemonHandle).

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
            daemon: $crate::blocking::DaemonHandle<::ferrokafka_kafka::DaemonStatus<$row>>,
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
                    daemon: $crate::blocking::DaemonHandle::new(daemon, $public),
                })
            }

            /// Asks the daemon to stop; returns at once.
            fn request_stop(&self) -> ::pyo3::PyResult<()> {
                self.daemon.request_stop()
            }

            /// Waits up to `timeout` seconds (forever when None) for the daemon to end; True once
            /// it has.
            #[pyo3(signature = (timeout=None))]
            fn wait(&self, py: ::pyo3::Python<'_>, timeout: Option<f64>) -> ::pyo3::PyResult<bool> {
                self.daemon.wait(py, timeout)
            }

            $(#[$status_meta])*
            fn status(&self, py: ::pyo3::Python<'_>) -> ::pyo3::PyResult<Vec<$py_row>> {
                let rows = self.daemon.status().partitions;
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
