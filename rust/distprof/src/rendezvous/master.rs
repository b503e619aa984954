//! The master's part of the rendezvous (node 0): open a fresh session round with a small
//! announcement. After that the master is a node like any other: it joins and meets its
//! own peers, and never reads the other nodes' joins.

use super::session::round_key;
use super::values::{encode, Announcement, PROTOCOL_VERSION};
use super::{digest, first_free_round, session, RendezvousError};
use crate::config::Config;
use crate::context::GraphParams;
use crate::kv::KvStore;

/// Writes the announcement of the first free round and returns it.
pub(super) fn open_round(
    kv: &dyn KvStore,
    num_nodes: u32,
    config: &Config,
) -> Result<Announcement, RendezvousError> {
    let round = first_free_round(kv)?;
    let announcement = Announcement {
        version: PROTOCOL_VERSION,
        session_id: session::new_session_id(),
        session_token: session::new_session_token(),
        num_nodes,
        reference_node: config.reference_node,
        config_digest: digest::config_digest(config),
        config: digest::shared_config_value(config),
        graph: GraphParams {
            out_degree: config.probe_out_degree,
            seed: config.graph_seed,
        },
    };
    kv.set(&round_key(round), &encode(&announcement))?;
    tracing::debug!(
        "rendezvous: master opened round {round} as session {}",
        announcement.session_id
    );
    Ok(announcement)
}
