//! `distprof report`: one self-contained HTML page that shows how well a run's clocks were
//! synchronized (docs/report.md describes every panel).
//!
//! [`render`] is pure: a [`ReportInput`] in, the page out. Loaders (`load`: a run directory of
//! per-node JSONL) only build the input. Large runs stay readable and small:
//! points are thinned per pixel keeping each bucket's extremes ([`downsample`]), only the
//! worst nodes and edges get a plot, the rest are rows of a table and cells of a heatmap.

pub mod analysis;
pub mod downsample;
pub mod edges;
pub mod input;
pub mod load;
pub mod loops;
pub mod network;
pub mod nodes;
pub mod page;
pub mod svg;

pub use input::{
    owd_points, EdgeHealth, EdgeSeries, EdgeWindowFit, LoopResidual, OwdPoint,
    ReportInput, RunFacts,
};

/// How much of a large run gets its own plot or table row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Per-node offset/drift plots, for the worst nodes.
    pub node_plots: usize,
    /// Per-edge one-way-delay plots, for the worst edges.
    pub edge_plots: usize,
    /// Rows of the node and edge tables (worst first).
    pub table_rows: usize,
}

impl Default for Limits {
    fn default() -> Self {
        // A dozen plots of each kind fill two screens and keep a 64-node page near 1 MB;
        // tables stay under ~0.3 MB at 2,000 rows.
        Limits {
            node_plots: 12,
            edge_plots: 12,
            table_rows: 2_000,
        }
    }
}

/// The report page for `input`.
pub fn render(input: &ReportInput) -> String {
    render_with(input, &Limits::default())
}

pub fn render_with(input: &ReportInput, limits: &Limits) -> String {
    page::page(input, limits)
}
