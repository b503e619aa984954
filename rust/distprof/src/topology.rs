//! The probe graph: who probes whom. A pure function of (node count, out-degree, seed) that
//! every node evaluates for itself: [`ProbeGraph::out_edges`] and [`ProbeGraph::in_edges`]
//! of one node cost O(k) and O(k³) hash evaluations, independent of the node count, so
//! that no node of a 16,384-node job needs the whole graph ([`build_probe_graph`], the
//! union over all nodes, is for offline tools and tests).
//!
//! Construction:
//! 1. a directed ring `i -> i+1 mod N`: strongly connected, every node probes and is
//!    probed, and the ring itself is a directed cycle (an undirected one for N >= 3);
//! 2. chords. Sparse graphs (N large against k): node i's chord candidates are
//!    `π_m(i)` for `2k + 1` seeded pseudo-random permutations `π_m` of
//!    0..N (a Feistel network with cycle walking, [`Permutation`]), whose inverses are
//!    as cheap: whoever `π_m` maps onto i is `π_m⁻¹(i)`, so a node finds who probes it
//!    without a scan. A candidate is skipped when it is i itself, i's ring successor or
//!    an earlier candidate of i (a duplicate), or when the reverse edge exists: the ring
//!    edge, or the reverse chord when that one comes first in (permutation, source)
//!    order (the pair is measured in both directions by either edge, so the second
//!    would add nothing). All skip rules look only at the two ends' candidates, so both
//!    ends reach the same verdict. Node i keeps its first k - 1 candidates that survive;
//!    the spare candidates make up for skipped ones (a node has fewer chords only when
//!    more than k + 2 of its candidates are skipped, see `CANDIDATES_PER_PEER`). Dense graphs (N <= `DENSE_MAX_NODES_PER_PEER` · k): every node draws its
//!    k - 1 chords without repetition from the N - 2 candidates by a partial
//!    Fisher-Yates shuffle seeded by (seed, N, node); there a node finds who probes it
//!    by evaluating all N nodes, which is O(k²).
//!
//! Chords close short loops (triangles, squares) that loop closure uses to check and
//! correct single edges, and make the graph an expander: every node is a few hops from
//! the reference node.
//!
//! The PRNG and the permutations are written here so that the graph never changes with a
//! crate's algorithm: the same (N, k, seed) gives the same graph in every version and on
//! every node.

use crate::context::NodeId;

/// Chord candidates (permutations) per peer of the out-degree k: 2k + 1 in all, k + 2
/// more than the k - 1 chords a node keeps. A candidate is skipped with probability
/// about 2k/N (a duplicate, a reverse edge); in simulations with random permutations at
/// the first sparse size (8k + 1 nodes) no node of ten graphs lacked a chord for k = 3,
/// 4, 8, 16 and 20, where k - 1 + 2 candidates left 2 to 60 nodes in 100 short.
const CANDIDATES_PER_PEER: u32 = 2;

/// Up to this many nodes per peer (N <= this · k) the graph is built densely (see the
/// module comment): permutation candidates collide too often there (a candidate is
/// skipped with probability about 2k/N), while the dense draw costs O(N) = O(k) per node
/// and finding a node's probers O(N²) = O(k²).
const DENSE_MAX_NODES_PER_PEER: u32 = 8;

/// Feistel rounds of a [`Permutation`]: four rounds of a well-mixed round function give
/// a pseudo-random permutation (Luby and Rackoff proved three enough against chosen
/// inputs); more would only cost time.
const FEISTEL_ROUNDS: u64 = 4;

/// The splitmix64 finalizer: a bijective, well-mixed hash of 64 bits.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

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
        mix64(self.state)
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

/// A pseudo-random permutation of `0..n` with an O(1) inverse: a balanced Feistel network
/// on the smallest even number of bits that holds n - 1, restricted to `0..n` by cycle
/// walking (re-applying it until the value falls below n, which it does because the
/// values of a cycle through x < n include x; the domain is under 4n, so the expected
/// walk is under four steps).
#[derive(Debug, Clone, Copy)]
pub struct Permutation {
    n: u64,
    half_bits: u32,
    key: u64,
}

impl Permutation {
    pub fn new(n: u32, key: u64) -> Permutation {
        let bits = (64 - (n.max(2) as u64 - 1).leading_zeros()).max(2);
        Permutation { n: n as u64, half_bits: bits.div_ceil(2), key }
    }

    fn round(&self, r: u64, x: u64) -> u64 {
        mix64(self.key ^ mix64(x ^ (r << 56))) & ((1 << self.half_bits) - 1)
    }

    fn encrypt(&self, x: u64) -> u64 {
        let mask = (1 << self.half_bits) - 1;
        let (mut l, mut r) = (x >> self.half_bits, x & mask);
        for round in 0..FEISTEL_ROUNDS {
            (l, r) = (r, l ^ self.round(round, r));
        }
        l << self.half_bits | r
    }

    fn decrypt(&self, x: u64) -> u64 {
        let mask = (1 << self.half_bits) - 1;
        let (mut l, mut r) = (x >> self.half_bits, x & mask);
        for round in (0..FEISTEL_ROUNDS).rev() {
            (l, r) = (r ^ self.round(round, l), l);
        }
        l << self.half_bits | r
    }

    /// π(x) for x < n.
    pub fn apply(&self, x: u32) -> u32 {
        let mut y = self.encrypt(x as u64);
        while y >= self.n {
            y = self.encrypt(y);
        }
        y as u32
    }

    /// π⁻¹(y) for y < n.
    pub fn invert(&self, y: u32) -> u32 {
        let mut x = self.decrypt(y as u64);
        while x >= self.n {
            x = self.decrypt(x);
        }
        x as u32
    }
}

/// The largest out-degree: the configuration's limit (`probe_out_degree`), and what a
/// node evaluating an announcement from the store clamps to, so that a corrupted value
/// cannot make it allocate without bound.
pub const MAX_OUT_DEGREE: u32 = 64;

/// The out-degree actually used for `num_nodes` nodes: the configured value clamped to
/// 1..=min(N-1, `MAX_OUT_DEGREE`) (0 for a single node, which has no peers).
pub fn effective_out_degree(num_nodes: u32, configured: u32) -> u32 {
    if num_nodes <= 1 {
        0
    } else {
        configured.clamp(1, (num_nodes - 1).min(MAX_OUT_DEGREE))
    }
}

/// The probe graph of one run, evaluated node by node.
#[derive(Debug, Clone)]
pub struct ProbeGraph {
    num_nodes: u32,
    /// Chords per node: the effective out-degree minus the ring edge.
    chords: u32,
    seed: u64,
    /// The candidate permutations of a sparse graph; empty for a dense one.
    perms: Vec<Permutation>,
}

impl ProbeGraph {
    pub fn new(num_nodes: u32, configured_out_degree: u32, seed: u64) -> ProbeGraph {
        let chords = effective_out_degree(num_nodes, configured_out_degree).saturating_sub(1);
        let dense = num_nodes <= DENSE_MAX_NODES_PER_PEER.saturating_mul(chords + 1);
        let perms = if dense || chords == 0 {
            Vec::new()
        } else {
            (0..CANDIDATES_PER_PEER * (chords + 1) + 1)
                .map(|m| Permutation::new(num_nodes, perm_key(seed, num_nodes, m)))
                .collect()
        };
        ProbeGraph { num_nodes, chords, seed, perms }
    }

    pub fn num_nodes(&self) -> u32 {
        self.num_nodes
    }

    fn succ(&self, i: u32) -> u32 {
        ((i as u64 + 1) % self.num_nodes as u64) as u32
    }

    fn pred(&self, i: u32) -> u32 {
        ((i as u64 + self.num_nodes as u64 - 1) % self.num_nodes as u64) as u32
    }

    fn is_dense(&self) -> bool {
        self.perms.is_empty() && self.chords > 0
    }

    /// The peers `node` probes, ascending.
    pub fn out_edges(&self, node: NodeId) -> Vec<NodeId> {
        if self.num_nodes <= 1 || node >= self.num_nodes {
            return Vec::new();
        }
        let mut out = vec![self.succ(node)];
        if self.is_dense() {
            out.extend(self.dense_chords(node));
        } else {
            out.extend(self.sparse_chords(node).into_iter().map(|(_, v)| v));
        }
        out.sort_unstable();
        out
    }

    /// The peers that probe `node`, ascending.
    pub fn in_edges(&self, node: NodeId) -> Vec<NodeId> {
        if self.num_nodes <= 1 || node >= self.num_nodes {
            return Vec::new();
        }
        let mut probers = vec![self.pred(node)];
        if self.is_dense() {
            // N is at most a few k here: evaluating every node is O(k²).
            probers.extend((0..self.num_nodes).filter(|&v| v != self.pred(node) && self.dense_chords(v).contains(&node)));
        } else {
            for perm in &self.perms {
                let v = perm.invert(node);
                if !probers.contains(&v) && self.sparse_chords(v).iter().any(|&(_, w)| w == node) {
                    probers.push(v);
                }
            }
        }
        probers.sort_unstable();
        probers
    }

    /// A dense graph's chords of node i: a partial Fisher-Yates shuffle of every node but
    /// i and its ring successor.
    fn dense_chords(&self, i: u32) -> Vec<NodeId> {
        let n = self.num_nodes as usize;
        let (i, succ) = (i as usize, self.succ(i) as usize);
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
        let candidates = n - 2;
        let chords = self.chords as usize;
        let mut rng = SplitMix64::new(node_seed(self.seed, self.num_nodes, i as u32));
        let mut pool: Vec<usize> = (0..candidates).collect();
        (0..chords)
            .map(|c| {
                let j = c + rng.below((candidates - c) as u64) as usize;
                pool.swap(c, j);
                node_of(pool[c]) as NodeId
            })
            .collect()
    }

    /// A sparse graph's chords of node i as (candidate index, peer): the first `chords`
    /// candidates that no skip rule removes (see the module comment). O(k) permutation
    /// evaluations and O(k²) comparisons.
    fn sparse_chords(&self, i: u32) -> Vec<(u32, NodeId)> {
        let mut kept = Vec::with_capacity(self.chords as usize);
        let targets: Vec<u32> = self.perms.iter().map(|p| p.apply(i)).collect();
        // sources[m] = π_m⁻¹(i): the node whose candidate m is i.
        let sources: Vec<u32> = self.perms.iter().map(|p| p.invert(i)).collect();
        for (m, &v) in targets.iter().enumerate() {
            if kept.len() == self.chords as usize {
                break;
            }
            let duplicate = targets[..m].contains(&v);
            if v == i || v == self.succ(i) || v == self.pred(i) || duplicate {
                continue;
            }
            // The reverse chord v -> i, v's first candidate towards i, wins when it comes
            // first in (candidate, source) order.
            let reverse_first = sources.iter().position(|&u| u == v).is_some_and(|mv| (mv, v) < (m, i));
            if !reverse_first {
                kept.push((m as u32, v));
            }
        }
        kept
    }
}

/// Builds `out_edges[i]`, the peers node i probes, sorted ascending: the union of
/// [`ProbeGraph::out_edges`] over all nodes, for offline tools and tests.
pub fn build_probe_graph(
    num_nodes: u32,
    configured_out_degree: u32,
    seed: u64,
) -> Vec<Vec<NodeId>> {
    let g = ProbeGraph::new(num_nodes, configured_out_degree, seed);
    (0..num_nodes).map(|i| g.out_edges(i)).collect()
}

/// A per-node seed that differs for every (seed, N, node), so that adding nodes to a run
/// does not shift every node's chords in lockstep.
fn node_seed(seed: u64, num_nodes: u32, node: u32) -> u64 {
    let mut g = SplitMix64::new(
        seed ^ ((num_nodes as u64) << 32 | node as u64).wrapping_mul(0xd1b5_4a32_d192_ed03),
    );
    g.next_u64()
}

/// The key of candidate permutation m, distinct for every (seed, N, m).
fn perm_key(seed: u64, num_nodes: u32, m: u32) -> u64 {
    mix64(mix64(seed ^ 0x7065_726d_7574_6521) ^ ((num_nodes as u64) << 32 | m as u64))
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
        // Three seeds over the whole range; a high degree over the sizes where it is dense.
        // Debug builds make this the slow test of the crate.
        let cases = [
            (1u64, 8u32, 1024u32),
            (12345, 4, 1024),
            (u64::MAX, 3, 1024),
            (2, 20, 128),
        ];
        for (seed, k, max_n) in cases {
            let mut short = 0usize;
            let mut sparse_nodes = 0usize;
            for n in 2u32..=max_n {
                let g = build_probe_graph(n, k, seed);
                let keff = k.min(n - 1) as usize;
                let dense = n <= DENSE_MAX_NODES_PER_PEER * keff as u32;
                assert_eq!(g.len(), n as usize);
                let mut in_deg = vec![0usize; n as usize];
                for (u, edges) in g.iter().enumerate() {
                    if dense {
                        assert_eq!(edges.len(), keff, "n={n} k={k} seed={seed} node {u} out-degree");
                    } else {
                        assert!(edges.len() <= keff, "n={n} k={k} seed={seed} node {u} out-degree {}", edges.len());
                        sparse_nodes += 1;
                        short += keff - edges.len();
                    }
                    assert!(edges.windows(2).all(|w| w[0] < w[1]), "duplicates at n={n} node {u}");
                    assert!(edges.iter().all(|&v| (v as usize) != u && v < n), "self/out-of-range edge");
                    assert!(edges.contains(&((u as u32 + 1) % n)), "ring edge missing");
                    for &v in edges {
                        in_deg[v as usize] += 1;
                    }
                }
                assert!(in_deg.iter().all(|&d| d >= 1), "a node nobody probes at n={n}");
                assert!(strongly_connected(&g), "not strongly connected at n={n} k={k} seed={seed}");
                // Directed cycle: the ring. Undirected cycle: impossible for N = 2.
                if n >= 3 {
                    assert!(undirected_pairs(&g) >= n as usize, "no undirected cycle at n={n}");
                }
            }
            // The spare candidates make up for skipped ones: sparse nodes lack a chord
            // one time in a thousand or less.
            assert!(
                short * 1000 <= sparse_nodes.max(1),
                "k={k} seed={seed}: {short} chords missing over {sparse_nodes} sparse nodes"
            );
        }
    }

    #[test]
    fn in_edges_are_exactly_the_nodes_whose_out_edges_name_the_node() {
        for (n, k, seed) in [(2u32, 8u32, 1u64), (3, 8, 9), (17, 4, 3), (40, 8, 1), (41, 8, 1), (300, 8, 7), (5000, 16, 11), (600, 64, 5)] {
            let graph = ProbeGraph::new(n, k, seed);
            let all = build_probe_graph(n, k, seed);
            let mut want = vec![Vec::new(); n as usize];
            for (u, edges) in all.iter().enumerate() {
                for &v in edges {
                    want[v as usize].push(u as NodeId);
                }
            }
            // Every node of the small graphs, about 200 of the large ones (debug builds).
            for v in (0..n).step_by((n as usize / 200).max(1)) {
                assert_eq!(graph.in_edges(v), want[v as usize], "n={n} k={k} seed={seed} node {v}");
            }
        }
    }

    #[test]
    fn one_nodes_edges_need_no_other_nodes_even_at_four_billion() {
        // O(k) and O(k³) per node: a graph far too large to build answers at once, and
        // both ends of every edge agree.
        let n = 4_000_000_000u32;
        let graph = ProbeGraph::new(n, 8, 3);
        for node in [0, 1, 123_456_789, n - 1] {
            let out = graph.out_edges(node);
            assert_eq!(out.len(), 8, "node {node}: {out:?}");
            for &v in &out {
                assert!(graph.in_edges(v).contains(&node), "{node} -> {v} unknown to {v}");
            }
            let probers = graph.in_edges(node);
            assert!((1..=10).contains(&probers.len()), "node {node}: {probers:?}");
            for &u in &probers {
                assert!(graph.out_edges(u).contains(&node), "{u} -> {node} unknown to {u}");
            }
        }
    }

    /// Hop counts from the reference node 0 to every node: along the edges' direction
    /// (`undirected` false) or over the undirected graph the estimator solves on.
    fn hops_from_0(g: &[Vec<NodeId>], undirected: bool) -> Vec<u32> {
        let mut adj = vec![Vec::new(); g.len()];
        for (u, edges) in g.iter().enumerate() {
            for &v in edges {
                adj[u].push(v as usize);
                if undirected {
                    adj[v as usize].push(u);
                }
            }
        }
        let mut hops = vec![u32::MAX; g.len()];
        hops[0] = 0;
        let mut queue = std::collections::VecDeque::from([0usize]);
        while let Some(u) = queue.pop_front() {
            for &v in &adj[u] {
                if hops[v] == u32::MAX {
                    hops[v] = hops[u] + 1;
                    queue.push_back(v);
                }
            }
        }
        hops
    }

    #[test]
    fn the_16384_node_graph_is_an_expander_with_balanced_in_degrees() {
        // The graph before the permutations (per-node random chords, rejection sampled)
        // measured: undirected hops from the reference mean 3.84, max 5; directed max 7;
        // in-degrees 1 to 23. This one: mean 3.80, max 5; directed max 6; in-degrees 7 to 9.
        let g = build_probe_graph(16_384, 8, 1);
        let undirected = hops_from_0(&g, true);
        let mean = undirected.iter().map(|&h| h as f64).sum::<f64>() / 16_383.0;
        assert!(mean < 3.9 && *undirected.iter().max().unwrap() <= 5, "mean {mean}");
        assert!(*hops_from_0(&g, false).iter().max().unwrap() <= 6);
        let mut in_deg = vec![0u32; g.len()];
        g.iter().flatten().for_each(|&v| in_deg[v as usize] += 1);
        assert!(in_deg.iter().all(|d| (6..=10).contains(d)), "{:?}", (in_deg.iter().min(), in_deg.iter().max()));
    }

    #[test]
    fn permutations_are_bijections_with_their_inverse() {
        for (n, key) in [(1u32, 0u64), (2, 1), (3, 2), (5, 3), (64, 4), (65, 5), (1000, 6), (4097, 7)] {
            let p = Permutation::new(n, key);
            let mut seen = vec![false; n as usize];
            for x in 0..n {
                let y = p.apply(x);
                assert!(y < n && !seen[y as usize], "n={n}: {x} -> {y} twice or out of range");
                seen[y as usize] = true;
                assert_eq!(p.invert(y), x, "n={n}");
            }
        }
        // Not the identity, and the key matters.
        let (a, b) = (Permutation::new(1000, 1), Permutation::new(1000, 2));
        assert!((0..1000).filter(|&x| a.apply(x) == x).count() < 10);
        assert!((0..1000).filter(|&x| a.apply(x) == b.apply(x)).count() < 10);
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
        // No reciprocal pairs when sparse: the skip rule removes them.
        let reciprocal = g
            .iter()
            .enumerate()
            .flat_map(|(u, e)| e.iter().map(move |&v| (u, v as usize)))
            .filter(|&(u, v)| g[v].contains(&(u as u32)))
            .count();
        assert_eq!(reciprocal, 0, "{reciprocal} reciprocal edges");
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
