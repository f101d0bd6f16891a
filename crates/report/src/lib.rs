//! What farmem shows people: each kind of result in a module of its own
//! that holds its text tables, CSV, figure and HTML section ([`probe`],
//! [`bench`](mod@bench), [`xy`], [`policies`], [`matrix`], as ripgrep's printer keeps
//! one printer per output kind); a result read back into its type
//! ([`doc`]); the chart kit the figures share ([`plot`]: SVG or PNG, text
//! in a bundled DejaVu Sans so a figure needs no fonts on the machine);
//! text and CSV tables ([`table`]); the page that puts sections
//! together ([`html`]); and what all of them share, escaping and the
//! machine line ([`words`], a leaf). tests/layers.rs keeps the modules
//! free of circles.

pub mod bench;
pub mod doc;
pub mod html;
pub mod matrix;
pub mod plot;
pub mod policies;
pub mod probe;
pub mod table;
pub mod words;
pub mod xy;

pub use doc::{read_result, Doc, Kind};

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ReportError {
    /// A plot file of a kind farmem cannot write, or nothing to plot.
    #[error("{0}")]
    Format(String),
    /// The drawing library failed.
    #[error("plot: {0}")]
    Draw(String),
    #[error("writing {path}: {why}")]
    Write { path: String, why: String },
    /// JSON that is not a farmem result, or not one this version reads.
    #[error("{0}")]
    Input(String),
}
