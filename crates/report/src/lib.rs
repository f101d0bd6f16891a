//! What farmem draws and writes for people: every figure (`plot`: one
//! [`plot::Figure`] per picture, SVG or PNG, text in a bundled DejaVu Sans
//! so that a plot needs no fonts on the machine) and the HTML report of
//! probe, numa and bench results (`html`), which inlines those figures as
//! SVG. Text and CSV come from the same place: `text` renders each kind of
//! result through one [`table::Table`].

pub mod html;
pub mod plot;
pub mod table;
pub mod text;

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
