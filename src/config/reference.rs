//! The reference and the chart schema, generated from the clap definitions (tests only).
