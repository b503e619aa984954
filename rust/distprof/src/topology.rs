//! The probe graph: who probes whom. A pure function of (node count, out-degree, seed).
//!
//! Construction, O(N·k):
//! 1. a directed ring `i -> i+1 mod N`: strongly connected, every node probes and is
//!    probed, and the ring itself is a directed cycle (an undirected one for N >= 3);
//! 2. `k - 1` random chords per node, drawn without repetition from a splitmix64 stream
//!    seeded by (seed, N, node). Chords close short loops (triangles, squares) that loop
//!    closure uses to check and correct single edges, and shorten every node's path to
//!    the reference node. A chord `i -> j` is avoided when `j -> i` already exists (the
//!    pair is measured in both directions by either edge), unless the graph is too dense
//!    to avoid it.
//!
//! The PRNG is written here so that the graph never changes with a crate's algorithm:
//! the same (N, k, seed) gives the same graph in every version and on every node. The
//! prototype's graph was a DAG for N <= 6 whose last node probed nobody;
//! this one is strongly connected for every N >= 2.

use crate::context::NodeId;

/// Rejection-sampling attempts per chord before the reciprocal-edge preference is
/// dropped; a chord is always found because k - 1 <= N - 2 candidates exist.
const RECIPROCAL_AVOID_TRIES: u32 = 8;

/// The splitmix64 generator (Steele, Lea, Flood 2014): tiny, fast, and well mixed even
/// from consecutive seeds.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0), by Lemire's multiply-shift with rejection: no modulo bias.
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = (self.next_u64() as u128) * (n as u128);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }
}

/// The out-degree actually used for `num_nodes` nodes: the configured value clamped to
/// 1..=N-1 (0 for a single node, which has no peers).
pub fn effective_out_degree(num_nodes: u32, configured: u32) -> u32 {
    if num_nodes <= 1 {
        0
    } else {
        configured.clamp(1, num_nodes - 1)
    }
}

/// Builds `out_edges[i]`, the peers node i probes, sorted ascending.
pub fn build_probe_graph(
    num_nodes: u32,
    configured_out_degree: u32,
    seed: u64,
) -> Vec<Vec<NodeId>> {
    let n = num_nodes as usize;
    let k = effective_out_degree(num_nodes, configured_out_degree) as usize;
    let mut out: Vec<Vec<NodeId>> = (0..n).map(|_| Vec::with_capacity(k)).collect();
    if n <= 1 {
        return out;
    }
    for (i, edges) in out.iter_mut().enumerate() {
        edges.push(((i + 1) % n) as NodeId);
    }
    let chords = k - 1;
    if chords == 0 {
        return out;
    }
    // Candidates for node i's chords: every node but i and its ring successor (N - 2).
    let candidates = n - 2;
    for i in 0..n {
        let mut rng = SplitMix64::new(node_seed(seed, num_nodes, i as u32));
        let succ = (i + 1) % n;
        // Maps a candidate index 0..N-2 to a node id, skipping i and succ.
        let node_of = |c: usize| -> usize {
            let (lo, hi) = if i < succ { (i, succ) } else { (succ, i) };
            let mut v = c;
            if v >= lo {
                v += 1;
            }
            if v >= hi {
                v += 1;
            }
            v
        };
        if 2 * chords > candidates {
            // Dense: a partial Fisher-Yates over the N - 2 candidates, O(N) = O(k) here.
            let mut pool: Vec<usize> = (0..candidates).collect();
            for c in 0..chords {
                let j = c + rng.below((candidates - c) as u64) as usize;
                pool.swap(c, j);
                out[i].push(node_of(pool[c]) as NodeId);
            }
        } else {
            // Sparse: rejection sampling, O(k) expected per chord with a small `contains`.
            for _ in 0..chords {
                let mut tries = 0;
                loop {
                    let j = node_of(rng.below(candidates as u64) as usize);
                    tries += 1;
                    if out[i].contains(&(j as NodeId)) {
                        continue;
                    }
                    let reciprocal = out[j].contains(&(i as NodeId));
                    if reciprocal && tries <= RECIPROCAL_AVOID_TRIES {
                        continue;
                    }
                    out[i].push(j as NodeId);
                    break;
                }
            }
        }
    }
    for edges in &mut out {
        edges.sort_unstable();
    }
    out
}

/// A per-node seed that differs for every (seed, N, node), so that adding nodes to a run
/// does not shift every node's chords in lockstep.
fn node_seed(seed: u64, num_nodes: u32, node: u32) -> u64 {
    let mut g = SplitMix64::new(
        seed ^ ((num_nodes as u64) << 32 | node as u64).wrapping_mul(0xd1b5_4a32_d192_ed03),
    );
    g.next_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reachable_all(n: usize, adj: &[Vec<usize>]) -> bool {
        let mut seen = vec![false; n];
        let mut stack = vec![0usize];
        seen[0] = true;
        let mut count = 1;
        while let Some(u) = stack.pop() {
            for &v in &adj[u] {
                if !seen[v] {
                    seen[v] = true;
                    count += 1;
                    stack.push(v);
                }
            }
        }
        count == n
    }

    fn strongly_connected(g: &[Vec<NodeId>]) -> bool {
        let n = g.len();
        let fwd: Vec<Vec<usize>> = g
            .iter()
            .map(|e| e.iter().map(|&v| v as usize).collect())
            .collect();
        let mut rev = vec![Vec::new(); n];
        for (u, edges) in g.iter().enumerate() {
            for &v in edges {
                rev[v as usize].push(u);
            }
        }
        reachable_all(n, &fwd) && reachable_all(n, &rev)
    }

    /// Number of distinct undirected pairs; a connected graph on N nodes has an
    /// undirected cycle iff it has at least N distinct pairs. A reciprocal pair
    /// (u -> v and v -> u) is one undirected pair.
    fn undirected_pairs(g: &[Vec<NodeId>]) -> usize {
        let mut count = 0;
        for (u, edges) in g.iter().enumerate() {
            for &v in edges {
                let reciprocal = g[v as usize].binary_search(&(u as NodeId)).is_ok();
                if !reciprocal || (u as NodeId) < v {
                    count += 1;
                }
            }
        }
        count
    }

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // First outputs of splitmix64 from seed 0 (reference C implementation).
        let mut g = SplitMix64::new(0);
        assert_eq!(g.next_u64(), 0xe220a8397b1dcdaf);
        assert_eq!(g.next_u64(), 0x6e789e6aa1b965f4);
        assert_eq!(g.next_u64(), 0x06c45d188009454f);
    }

    #[test]
    fn below_is_uniform_enough() {
        let mut g = SplitMix64::new(7);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[g.below(10) as usize] += 1;
        }
        for c in counts {
            assert!((9_500..10_500).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn properties_hold_for_every_n_from_2_to_1024() {
        // Three seeds over the whole range; a high degree (the dense, Fisher-Yates regime)
        // over the sizes where it is dense. Debug builds make this the slow test of the crate.
        let cases = [
            (1u64, 8u32, 1024u32),
            (12345, 4, 1024),
            (u64::MAX, 3, 1024),
            (2, 20, 128),
        ];
        for (seed, k, max_n) in cases {
            {
                for n in 2u32..=max_n {
                    let g = build_probe_graph(n, k, seed);
                    let keff = k.min(n - 1) as usize;
                    assert_eq!(g.len(), n as usize);
                    let mut in_deg = vec![0usize; n as usize];
                    for (u, edges) in g.iter().enumerate() {
                        assert_eq!(
                            edges.len(),
                            keff,
                            "n={n} k={k} seed={seed} node {u} out-degree"
                        );
                        assert!(
                            edges.windows(2).all(|w| w[0] < w[1]),
                            "duplicates at n={n} node {u}"
                        );
                        assert!(
                            edges.iter().all(|&v| (v as usize) != u && v < n),
                            "self/out-of-range edge"
                        );
                        assert!(edges.contains(&((u as u32 + 1) % n)), "ring edge missing");
                        for &v in edges {
                            in_deg[v as usize] += 1;
                        }
                    }
                    assert!(
                        in_deg.iter().all(|&d| d >= 1),
                        "a node nobody probes at n={n}"
                    );
                    assert!(
                        strongly_connected(&g),
                        "not strongly connected at n={n} k={k} seed={seed}"
                    );
                    // Directed cycle: the ring. Undirected cycle: impossible for N = 2.
                    if n >= 3 {
                        assert!(
                            undirected_pairs(&g) >= n as usize,
                            "no undirected cycle at n={n}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn chords_add_short_cycles_beyond_the_ring() {
        // With k >= 2 and enough nodes, many triangles exist (loops loop-closure can use).
        let g = build_probe_graph(256, 8, 1);
        let mut adj = vec![std::collections::HashSet::new(); 256];
        for (u, e) in g.iter().enumerate() {
            for &v in e {
                adj[u].insert(v as usize);
                adj[v as usize].insert(u);
            }
        }
        let mut triangles = 0;
        for u in 0..256 {
            for &v in &adj[u] {
                if v > u {
                    triangles += adj[u].intersection(&adj[v]).filter(|&&w| w > v).count();
                }
            }
        }
        assert!(triangles > 50, "only {triangles} triangles");
        // Few reciprocal pairs when sparse: the preference avoids them.
        let reciprocal = g
            .iter()
            .enumerate()
            .flat_map(|(u, e)| e.iter().map(move |&v| (u, v as usize)))
            .filter(|&(u, v)| g[v].contains(&(u as u32)))
            .count();
        assert!(reciprocal < 20, "{reciprocal} reciprocal edges");
    }

    #[test]
    fn deterministic_and_seed_dependent() {
        assert_eq!(build_probe_graph(100, 8, 5), build_probe_graph(100, 8, 5));
        assert_ne!(build_probe_graph(100, 8, 5), build_probe_graph(100, 8, 6));
    }

    #[test]
    fn small_and_degenerate_sizes() {
        assert_eq!(build_probe_graph(0, 8, 1), Vec::<Vec<NodeId>>::new());
        assert_eq!(build_probe_graph(1, 8, 1), vec![Vec::<NodeId>::new()]);
        assert_eq!(build_probe_graph(2, 8, 1), vec![vec![1], vec![0]]);
        // N = 3 with k clamped to 2: the complete digraph.
        assert_eq!(
            build_probe_graph(3, 8, 9),
            vec![vec![1, 2], vec![0, 2], vec![0, 1]]
        );
        // k = 0 configured still probes one peer.
        assert_eq!(effective_out_degree(5, 0), 1);
        assert_eq!(effective_out_degree(1, 8), 0);
    }

    #[test]
    fn build_is_linear_in_n_times_k() {
        // 100k nodes, k = 16: well under a second even unoptimized if O(N·k).
        let start = std::time::Instant::now();
        let g = build_probe_graph(100_000, 16, 3);
        assert_eq!(g.iter().map(Vec::len).sum::<usize>(), 1_600_000);
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
    }
}
