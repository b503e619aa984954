//! Clock estimation: from one window's `ProbeRecord`s to every node's offset and drift
//! against the reference, with an error bound.
//!
//! Flow: `points` groups records by edge, checks them and applies the `purity` test, giving
//! forward and reverse one-way-delay points with x measured from the window midpoint;
//! `fit` draws one line per edge with the configured estimator (`hull` by default, `svm`,
//! or the `ntp` / `two_point` baselines); `network` solves all edges at once for node
//! offsets and drifts; `bound` turns the data into an error bound; `online` runs the whole
//! chain for one window and produces the `model::ClockSegment`s. `drift` refits a hull
//! line's slope over neighbouring windows: the past ones as a window closes
//! (`online::History`), both sides for the model a run delivers (`smoother`);
//! `stamp_mapping` adds what hardware stamps' mapping to the host clock may cost.
//! `breaks` finds a step or a frequency change of a node's clock inside a window and cuts
//! its segment into pieces there; a step of a millisecond or more is found before the
//! solve (`breaks::find_steps`, in `online::fit_window`), and the node's edges are fitted
//! on one side of it. `failover` solves a run's windows in order and
//! re-anchors those the reference cannot place on a surviving node; `wander` widens a
//! whole run's sigmas by the bend of the clocks' wander it measures. See
//! docs/estimation.md.

pub mod allowance;
pub mod bound;
pub mod breaks;
pub mod drift;
pub mod failover;
pub mod fit;
pub mod hull;
pub mod network;
pub mod normal;
pub mod node_edges;
pub mod ntp;
pub mod online;
pub mod points;
pub mod purity;
pub mod settings;
pub mod shared;
pub mod smoother;
pub mod stamp_mapping;
#[cfg(test)]
mod test_noise;
#[cfg(feature = "svm")]
pub mod svm;
pub mod two_point;
pub mod uncertainty;
pub mod variance;
pub mod wander;
pub mod window_fits;

pub use online::{estimate_fits_with_history, estimate_window, estimate_window_with_history, fit_window, solve, History, ModelBuilder, WindowEstimate};
pub use failover::{Anchor, AnchorReason, Anchoring};
pub use window_fits::{EdgeReport, WindowFits, WindowSpec};
pub use shared::{solve_shared_run, NodeWindowFits, SharedEdge, SharedLine};
pub use smoother::{estimate_run_windows, Smoother};
pub use stamp_mapping::add_stamp_mapping_errors;
pub use settings::{EstimatorSettings, NetworkMode};
