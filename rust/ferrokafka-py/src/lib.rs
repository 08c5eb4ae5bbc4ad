//! The `ferrokafka._native` extension module: registration only.

use pyo3::prelude::*;

mod blocking;
mod client;
mod convert;
mod errors;
mod message;
mod producer;

#[pymodule(gil_used = false)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::PyClient>()?;
    m.add_class::<client::PyNewTopic>()?;
    m.add_class::<client::PyClusterMetadata>()?;
    m.add_class::<client::PyTopicMetadata>()?;
    m.add_class::<client::PyPartitionMetadata>()?;
    m.add_class::<client::PyBrokerMetadata>()?;
    m.add_class::<message::PyMessage>()?;
    m.add_class::<producer::PyRawAsyncProducer>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
