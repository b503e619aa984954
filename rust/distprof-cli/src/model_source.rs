//! Where the clock models that `merge` and `validate` apply come from: `--models FILE` or
//! `--run-dir DIR` (flags shared by both commands), else the traces' own planes.

/// Where the clock models to apply come from; `merge` and `validate` both take these flags.
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ModelSource {
    /// JSON array of clock models (`distprof::model::NodeClockModel`) to apply instead of
    /// the ones in the traces' distprof planes, for the nodes it lists.
    #[arg(long)]
    models: Option<PathBuf>,
    /// Directory of the run's per-node JSONL files (`output_dir`): solve every node's clock
    /// network-wide from them (a node's own plane only knows its own edges) and apply that.
    #[arg(long, value_name = "DIR")]
    run_dir: Option<PathBuf>,
}

impl ModelSource {
    /// True when `--models` or `--run-dir` was given.
    pub fn given(&self) -> bool {
        self.models.is_some() || self.run_dir.is_some()
    }

    /// The clock models to apply: from a `--models` file, else from the network-wide solve
    /// over a run directory's per-node JSONL (`--run-dir`), else none (the traces' own).
    pub fn load(&self) -> anyhow::Result<Vec<distprof::model::NodeClockModel>> {
        match (&self.models, &self.run_dir) {
            (Some(_), Some(_)) => anyhow::bail!("give --models or --run-dir, not both"),
            // The same estimation `distprof report --run-dir` draws: every window of every
            // node's JSONL, solved network-wide against the reference.
            (None, Some(dir)) => distprof_offline::run_dir_estimate::models_of_run_dir(dir)
                .map_err(|e| anyhow::anyhow!("--run-dir {}: {e}", dir.display())),
            (models, None) => read_models(models.as_deref()),
        }
    }
}

impl ModelSource {
    /// Where the models come from, for merge's checks: the `--run-dir` (its session from
    /// the JSONL meta lines) or the `--models` file (its session when it records one).
    pub fn origin(&self) -> anyhow::Result<Option<distprof_offline::merge::belong::ModelOrigin>> {
        use distprof_offline::merge::belong::ModelOrigin;
        Ok(match (&self.models, &self.run_dir) {
            (_, Some(dir)) => {
                let files = distprof_offline::run_dir_estimate::read_run_dir(dir)
                    .map_err(|e| anyhow::anyhow!("--run-dir {}: {e}", dir.display()))?;
                Some(ModelOrigin { path: dir.clone(), session_id: files.first().map(|f| f.file.meta.session_id.clone()) })
            }
            (Some(p), None) => Some(ModelOrigin { path: p.clone(), session_id: read_models_file(p)?.session_id }),
            (None, None) => None,
        })
    }
}

/// A `--models` file: a JSON array of `NodeClockModel`, or an object that also says which
/// run the models are of: `{"session_id": "...", "models": [...]}`.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum ModelsFile {
    Bare(Vec<distprof::model::NodeClockModel>),
    OfRun { session_id: Option<String>, models: Vec<distprof::model::NodeClockModel> },
}

struct Models {
    session_id: Option<String>,
    models: Vec<distprof::model::NodeClockModel>,
}

fn read_models_file(p: &std::path::Path) -> anyhow::Result<Models> {
    let text = std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("--models {}: {e}", p.display()))?;
    let file: ModelsFile = serde_json::from_str(&text).map_err(|e| {
        anyhow::anyhow!("--models {}: not a JSON array of clock models nor {{\"session_id\": ..., \"models\": [...]}} ({e}); expected [{{\"node\":1,\"reachable\":true,\"segments\":[...]}}]", p.display())
    })?;
    Ok(match file {
        ModelsFile::Bare(models) => Models { session_id: None, models },
        ModelsFile::OfRun { session_id, models } => Models { session_id: session_id.filter(|s| !s.is_empty()), models },
    })
}

/// Reads a `--models` file's models (see [`ModelsFile`]).
pub fn read_models(
    path: Option<&std::path::Path>,
) -> anyhow::Result<Vec<distprof::model::NodeClockModel>> {
    match path {
        Some(p) => Ok(read_models_file(p)?.models),
        None => Ok(Vec::new()),
    }
}
