//! The probe graph the simulator uses: a ring plus chords, node i probing i + s for a fixed
//! set of strides s growing geometrically from 1 towards N (1, ~N^(1/D), ~N^(2/D), ...), so
//! every node is a few hops from every other (diameter ~ log N) and the graph has many
//! short cycles, like the real topology. The lead can swap this function for
//! `distprof::topology` without touching anything else.

use distprof::context::NodeId;

/// `out_edges[i]` lists the peers node i probes. `seed` is accepted so the real,
/// seeded topology can replace this one; the ring and chords do not use it.
pub fn probe_graph(num_nodes: u32, out_degree: u32, _seed: u64) -> Vec<Vec<NodeId>> {
    let n = num_nodes as u64;
    if n < 2 {
        return vec![Vec::new(); num_nodes as usize];
    }
    let d = (out_degree as u64).clamp(1, n - 1);
    // Geometric strides, bumped to stay distinct; always d of them since d <= n - 1.
    let mut strides: Vec<u64> = Vec::with_capacity(d as usize);
    for j in 0..d {
        let g = (n as f64).powf(j as f64 / d as f64).round() as u64;
        let prev = strides.last().copied().unwrap_or(0);
        strides.push(g.max(prev + 1));
    }
    // Bumping can overshoot n - 1 for small n; fall back to 1..=d there.
    if strides.last().is_some_and(|&s| s > n - 1) {
        strides = (1..=d).collect();
    }
    (0..n)
        .map(|i| strides.iter().map(|s| ((i + s) % n) as NodeId).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn degree_and_no_self_loops() {
        for (n, d) in [(2, 8), (8, 8), (64, 8), (512, 8), (4096, 8)] {
            let g = probe_graph(n, d, 1);
            assert_eq!(g.len(), n as usize);
            for (i, out) in g.iter().enumerate() {
                assert_eq!(out.len() as u32, d.min(n - 1), "n={n}");
                assert!(out.iter().all(|&j| j as usize != i && j < n));
                let mut s = out.clone();
                s.sort_unstable();
                s.dedup();
                assert_eq!(s.len(), out.len());
            }
        }
    }
}
