//! Hybrid search over a tenant's vector stores: [`Retrieval::search`](crate::Retrieval::search).
//!
//! 1. Every vector store must be the owner's (one lookup each), else the search fails with
//!    `VectorStoreNotFound` naming it and nothing is searched.
//! 2. The stores' completed files are read with their attributes; `filters` keep some of them.
//!    The stores are marked active unless this worker marked them within
//!    [`TOUCH_INTERVAL`](crate::activity::TOUCH_INTERVAL).
//! 3. For each query: the lexical index's best chunks (BM25, restricted to the kept files), and —
//!    when an embedder is configured and a store has embeddings of the query's length — the
//!    nearest chunks by cosine, by a full scan of the store's vectors (held in the worker's
//!    [`VectorCache`](crate::cache::VectorCache) while the store's generation is unchanged). The
//!    lexical searches run alongside the queries' embedding and the scan (on a blocking thread).
//! 4. The ranked lists (one or two per query) are fused and chunks grouped by file.
//!
//! Scores, 0..=1, higher is better:
//! - hybrid (some vector list): reciprocal-rank fusion with k = 60 — a chunk's score is the sum
//!   over the lists of `weight / (60 + rank)` (rank from 1; 0 where it is absent; the weight the
//!   request gives vector or lexical lists, 1 by default), divided by the most any chunk can get
//!   (the weights' sum / 61): 1 is "first in every list";
//! - lexical only: each query's BM25 scores divided by its best one, averaged over the queries:
//!   1 is "the best lexical match of every query".
//!
//! A file's score is its best chunk's; its `content` is its best chunks (at most
//! [`CHUNKS_PER_FILE`], best first) at or above `score_threshold`. Files are returned best first,
//! at most `max_num_results`.
//!
//! [`Retrieval::search_with_stages`](crate::Retrieval::search_with_stages) also tells how long
//! each stage took ([`SearchStages`]), for the benchmark.

use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use respgw_store_api::retrieval::{SearchableFile, StoreVectors};

use crate::{HybridWeights, Retrieval, SearchError, SearchRequest, SearchResult};

/// The reciprocal-rank fusion constant.
const RRF_K: f64 = 60.0;
/// Chunks of one file a result carries at most.
pub const CHUNKS_PER_FILE: usize = 3;
/// Candidates taken from each ranked list.
const MIN_CANDIDATES: usize = 50;

/// How long each stage of one search took. The lexical search overlaps the embedding and the
/// scan, so the stages add up to more than the search.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SearchStages {
    /// Ownership and generations of the stores, their searchable files, the filters.
    pub checks: Duration,
    /// Marking the stores active (zero when this worker marked them lately).
    pub touch: Duration,
    /// The lexical index's searches, all queries.
    pub lexical: Duration,
    /// Embedding the queries (alongside the lexical search).
    pub embedding: Duration,
    /// Reading stores' vectors that the cache did not hold.
    pub vector_reads: Duration,
    /// The vector scans, all queries (alongside the lexical search).
    pub scan: Duration,
    /// Fusing the ranked lists.
    pub fusion: Duration,
    /// Reading the chosen chunks' text and grouping them by file.
    pub fetch: Duration,
}

/// Time since `*mark`, moving the mark to now.
fn lap(mark: &mut Instant) -> Duration {
    let now = Instant::now();
    let elapsed = now - *mark;
    *mark = now;
    elapsed
}

impl Retrieval {
    /// Search the owner's vector stores; results best first, at most `max_num_results`.
    pub async fn search(&self, request: &SearchRequest) -> Result<Vec<SearchResult>, SearchError> {
        self.search_with_stages(request).await.map(|(results, _)| results)
    }

    /// [`Retrieval::search`], also telling how long each stage took.
    pub async fn search_with_stages(
        &self,
        request: &SearchRequest,
    ) -> Result<(Vec<SearchResult>, SearchStages), SearchError> {
        let started = Instant::now();
        let mut stages = SearchStages::default();
        let result = self.run_search(request, &mut stages).await;
        self.metrics().retrieval_search(started.elapsed());
        result.map(|results| (results, stages))
    }

    async fn run_search(
        &self,
        request: &SearchRequest,
        stages: &mut SearchStages,
    ) -> Result<Vec<SearchResult>, SearchError> {
        let store = self.store();
        let owner = request.owner.as_str();
        let mut mark = Instant::now();
        let mut generations = Vec::with_capacity(request.vector_store_ids.len());
        for id in &request.vector_store_ids {
            match store.generation(owner, id).await.map_err(SearchError::Store)? {
                Some(generation) => generations.push(generation),
                None => return Err(SearchError::VectorStoreNotFound(id.clone())),
            }
        }
        let files = store.searchable_files(owner, &request.vector_store_ids).await.map_err(SearchError::Store)?;
        let files: Vec<SearchableFile> = match &request.filters {
            Some(filter) => files.into_iter().filter(|f| filter.matches(&f.attributes)).collect(),
            None => files,
        };
        stages.checks = lap(&mut mark);
        self.mark_active(owner, &request.vector_store_ids).await?;
        stages.touch = lap(&mut mark);
        let queries: Vec<&String> = request.queries.iter().filter(|q| !q.trim().is_empty()).collect();
        if files.is_empty() || queries.is_empty() {
            return Ok(Vec::new());
        }
        let by_file: HashMap<(&str, &str), &SearchableFile> =
            files.iter().map(|f| ((f.vector_store_id.as_str(), f.file_id.as_str()), f)).collect();
        let restrict: Option<Vec<(String, String)>> = request
            .filters
            .as_ref()
            .map(|_| files.iter().map(|f| (f.vector_store_id.clone(), f.file_id.clone())).collect());
        let candidates = (request.max_num_results * CHUNKS_PER_FILE).max(MIN_CANDIDATES);

        // The stores' vectors; then two sides at once: the lexical index's searches (SQLite and
        // PostgreSQL reads run off the runtime thread), and the queries' embedding followed by
        // the vector scan on a blocking thread, so a hybrid search takes about the longer of the
        // two rather than their sum.
        let sources = self.searched_vectors(request, &generations).await?;
        let vectors: Vec<Arc<StoreVectors>> = sources.iter().map(|(_, vectors)| Arc::clone(vectors)).collect();
        stages.vector_reads = lap(&mut mark);
        let embedder = self.embedder().filter(|_| !vectors.is_empty());
        let allowed: Option<HashSet<String>> =
            request.filters.as_ref().map(|_| files.iter().map(|f| f.file_id.clone()).collect());
        let nearest = async {
            let Some(embedder) = embedder else { return Ok(None) };
            let texts: Vec<String> = queries.iter().map(|q| (*q).clone()).collect();
            let started = Instant::now();
            let embedded = embedder.embed(&texts).await.map_err(|e| SearchError::Embedding(e.0))?;
            let embedding = started.elapsed();
            let scan = tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                let lists = nearest_lists(&embedded, &vectors, allowed.as_ref(), candidates);
                (lists, started.elapsed())
            });
            let (lists, scan) = scan.await.map_err(|_| {
                SearchError::Store(respgw_store_api::StoreError::Unavailable("the vector scan did not finish".into()))
            })?;
            Ok::<_, SearchError>(Some((lists, embedding, scan)))
        };
        // Ranked lists of chunk ids, best first, with the lexical scores.
        let lexical = async {
            let started = Instant::now();
            let mut lists: Vec<Vec<(i64, f64)>> = Vec::with_capacity(queries.len());
            for query in &queries {
                let hits = store
                    .lexical_search(owner, &request.vector_store_ids, restrict.as_deref(), query, candidates)
                    .await
                    .map_err(SearchError::Store)?;
                lists.push(hits.into_iter().map(|hit| (hit.chunk_id, hit.score)).collect());
            }
            Ok::<_, SearchError>((lists, started.elapsed()))
        };
        let (nearest, lexical) = tokio::join!(nearest, lexical);
        let (lexical_lists, lexical_took) = lexical?;
        stages.lexical = lexical_took;
        let vector_lists = match nearest? {
            Some((lists, embedding, scan)) => {
                (stages.embedding, stages.scan) = (embedding, scan);
                lists
            }
            None => Vec::new(),
        };
        lap(&mut mark);

        let scores = if vector_lists.is_empty() {
            lexical_scores(&lexical_lists)
        } else {
            let weights = request.weights.unwrap_or(HybridWeights { embedding: 1.0, text: 1.0 });
            let lists: Vec<(f64, Vec<i64>)> = lexical_lists
                .iter()
                .map(|list| (weights.text, list.iter().map(|(id, _)| *id).collect()))
                .chain(vector_lists.into_iter().map(|list| (weights.embedding, list)))
                .collect();
            fused_scores(&lists)
        };
        let threshold = request.score_threshold.unwrap_or(0.0);
        let mut ranked: Vec<(i64, f64)> = scores.into_iter().filter(|(_, score)| *score >= threshold).collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        stages.fusion = lap(&mut mark);

        // Only the texts the results hold are read, when the vectors say which those are.
        let ids: Vec<i64> = match chunk_places(&ranked, &sources) {
            Some(places) => held_chunks(&ranked, &places, &by_file, request.max_num_results),
            None => ranked.iter().map(|(id, _)| *id).collect(),
        };
        let texts = store.chunks(owner, &ids).await.map_err(SearchError::Store)?;
        let texts: HashMap<i64, _> = texts.into_iter().map(|chunk| (chunk.chunk_id, chunk)).collect();
        let mut results: Vec<SearchResult> = Vec::new();
        let mut index_of: HashMap<(&str, &str), usize> = HashMap::new();
        for (id, score) in &ranked {
            let Some(chunk) = texts.get(id) else { continue };
            let key = (chunk.vector_store_id.as_str(), chunk.file_id.as_str());
            let Some(file) = by_file.get(&key) else { continue };
            match index_of.get(&key) {
                Some(&i) if results[i].content.len() < CHUNKS_PER_FILE => {
                    results[i].content.push(chunk.text.clone());
                }
                Some(_) => {}
                None if results.len() < request.max_num_results => {
                    index_of.insert(key, results.len());
                    results.push(SearchResult {
                        vector_store_id: file.vector_store_id.clone(),
                        file_id: file.file_id.clone(),
                        filename: file.filename.clone(),
                        score: *score,
                        attributes: file.attributes.clone(),
                        content: vec![chunk.text.clone()],
                    });
                }
                None => {}
            }
        }
        stages.fetch = lap(&mut mark);
        Ok(results)
    }

    /// Mark the stores active now, unless this worker did within the touch interval.
    async fn mark_active(&self, owner: &str, ids: &[String]) -> Result<(), SearchError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
            .unwrap_or_default();
        let due = self.touches().due(ids, now);
        if due.is_empty() {
            return Ok(());
        }
        self.store().touch_vector_stores(owner, &due, now).await.map_err(SearchError::Store)?;
        self.touches().record(&due, now);
        Ok(())
    }

    /// The vectors of the searched stores that have some, with their stores' ids (none without an
    /// embedder).
    async fn searched_vectors(
        &self,
        request: &SearchRequest,
        generations: &[i64],
    ) -> Result<Vec<(String, Arc<StoreVectors>)>, SearchError> {
        if self.embedder().is_none() {
            return Ok(Vec::new());
        }
        let mut stores = Vec::new();
        for (id, generation) in request.vector_store_ids.iter().zip(generations) {
            if let Some(vectors) = self.cached_vectors(&request.owner, id, *generation).await? {
                stores.push((id.clone(), vectors));
            }
        }
        Ok(stores)
    }

    /// The vectors of a store at `generation`, from the cache or read (and cached when they fit).
    async fn cached_vectors(
        &self,
        owner: &str,
        vector_store_id: &str,
        generation: i64,
    ) -> Result<Option<Arc<StoreVectors>>, SearchError> {
        if let Some(cached) = self.cache().get(vector_store_id, generation) {
            return Ok(cached);
        }
        let read = self.store().vectors(owner, vector_store_id).await.map_err(SearchError::Store)?.map(Arc::new);
        let read_generation = read.as_ref().map_or(generation, |v| v.generation);
        self.cache().put(vector_store_id, read_generation, read.clone());
        Ok(read)
    }
}

/// The vector store and file of every ranked chunk, from the searched stores' vectors; `None`
/// when some ranked chunk is not among them (a lexical hit in a store without vectors).
fn chunk_places<'a>(
    ranked: &[(i64, f64)],
    sources: &'a [(String, Arc<StoreVectors>)],
) -> Option<HashMap<i64, (&'a str, &'a str)>> {
    let wanted: HashSet<i64> = ranked.iter().map(|(id, _)| *id).collect();
    let mut places = HashMap::with_capacity(wanted.len());
    for (store_id, vectors) in sources {
        for (chunk_id, file_id) in vectors.chunk_ids.iter().zip(&vectors.file_ids) {
            if wanted.contains(chunk_id) {
                places.insert(*chunk_id, (store_id.as_str(), file_id.as_str()));
            }
        }
    }
    (places.len() == wanted.len()).then_some(places)
}

/// The ranked chunks the results will hold: the grouping of [`Retrieval::search`] (files best
/// first, at most [`CHUNKS_PER_FILE`] chunks each, at most `max_files` files) done on places alone.
fn held_chunks(
    ranked: &[(i64, f64)],
    places: &HashMap<i64, (&str, &str)>,
    by_file: &HashMap<(&str, &str), &SearchableFile>,
    max_files: usize,
) -> Vec<i64> {
    let mut held = Vec::new();
    let mut chunks_of: HashMap<(&str, &str), usize> = HashMap::new();
    for (id, _) in ranked {
        let Some(&place) = places.get(id) else { continue };
        if !by_file.contains_key(&place) {
            continue;
        }
        let known = chunks_of.len();
        match chunks_of.get_mut(&place) {
            Some(count) if *count < CHUNKS_PER_FILE => *count += 1,
            Some(_) => continue,
            None if known < max_files => {
                chunks_of.insert(place, 1);
            }
            None => continue,
        }
        held.push(*id);
    }
    held
}

/// For each embedded query, the nearest chunks by cosine over the stores with embeddings of its
/// length (best first; only chunks of the `allowed` files when given).
fn nearest_lists(
    embedded: &[Vec<f32>],
    stores: &[Arc<StoreVectors>],
    allowed: Option<&HashSet<String>>,
    candidates: usize,
) -> Vec<Vec<i64>> {
    let mut lists = Vec::with_capacity(embedded.len());
    for query in embedded {
        let mut best: BinaryHeap<Candidate> = BinaryHeap::with_capacity(candidates + 1);
        for vectors in stores {
            if vectors.dimensions as usize != query.len() {
                continue;
            }
            let keep = |i: usize| allowed.is_none_or(|allowed| allowed.contains(&vectors.file_ids[i]));
            top_k_into(query, vectors, candidates, keep, &mut best);
        }
        let mut ranked = best.into_vec();
        ranked.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.chunk_id.cmp(&b.chunk_id)));
        lists.push(ranked.into_iter().map(|c| c.chunk_id).collect());
    }
    lists
}

/// A chunk and its cosine, ordered so that a max-heap's top is the *worst* kept candidate.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    score: f32,
    chunk_id: i64,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Candidate {}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.score.total_cmp(&self.score).then(self.chunk_id.cmp(&other.chunk_id))
    }
}

/// Scan `vectors` against `query` and keep the best `k` (of those `keep` accepts) in `best`.
fn top_k_into(
    query: &[f32],
    vectors: &StoreVectors,
    k: usize,
    keep: impl Fn(usize) -> bool,
    best: &mut BinaryHeap<Candidate>,
) {
    let dimensions = vectors.dimensions as usize;
    if dimensions == 0 || k == 0 {
        return;
    }
    for (i, vector) in vectors.vectors.chunks_exact(dimensions).enumerate() {
        let score = dot(query, vector);
        if best.len() >= k && best.peek().is_some_and(|worst| score <= worst.score) {
            continue;
        }
        if !keep(i) {
            continue;
        }
        best.push(Candidate { score, chunk_id: vectors.chunk_ids[i] });
        if best.len() > k {
            best.pop();
        }
    }
}

/// Lanes of the dot product's accumulators: two 128-bit or one 256-bit register of `f32`.
const LANES: usize = 8;

/// The dot product of two vectors of one length, written for LLVM to vectorise: independent
/// accumulators over fixed-size blocks, no bounds checks in the loop, no allocation.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut sums = [0f32; LANES];
    let blocks_a = a.chunks_exact(LANES);
    let blocks_b = b.chunks_exact(LANES);
    let tail: f32 = blocks_a.remainder().iter().zip(blocks_b.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in blocks_a.zip(blocks_b) {
        for lane in 0..LANES {
            sums[lane] += x[lane] * y[lane];
        }
    }
    sums.iter().sum::<f32>() + tail
}

/// Weighted reciprocal-rank fusion of ranked lists of chunk ids (each with its weight),
/// normalised to 0..=1: 1 is "first in every list of some weight".
fn fused_scores(lists: &[(f64, Vec<i64>)]) -> Vec<(i64, f64)> {
    let mut scores: HashMap<i64, f64> = HashMap::new();
    for (weight, list) in lists {
        for (rank, id) in list.iter().enumerate() {
            *scores.entry(*id).or_default() += weight / (RRF_K + rank as f64 + 1.0);
        }
    }
    let best_possible = lists.iter().map(|(weight, _)| weight).sum::<f64>() / (RRF_K + 1.0);
    if best_possible <= 0.0 {
        return scores.into_keys().map(|id| (id, 0.0)).collect();
    }
    scores.into_iter().map(|(id, score)| (id, (score / best_possible).min(1.0))).collect()
}

/// Lexical scores: each query's BM25 divided by its best, averaged over the queries.
fn lexical_scores(lists: &[Vec<(i64, f64)>]) -> Vec<(i64, f64)> {
    let mut scores: HashMap<i64, f64> = HashMap::new();
    for list in lists {
        let best = list.iter().map(|(_, s)| *s).fold(0.0, f64::max);
        if best <= 0.0 {
            continue;
        }
        for (id, score) in list {
            *scores.entry(*id).or_default() += score.max(0.0) / best;
        }
    }
    let queries = lists.len().max(1) as f64;
    scores.into_iter().map(|(id, score)| (id, (score / queries).min(1.0))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vectors(chunks: &[(i64, &str)]) -> Arc<StoreVectors> {
        Arc::new(StoreVectors {
            generation: 1,
            dimensions: 1,
            chunk_ids: chunks.iter().map(|(id, _)| *id).collect(),
            file_ids: chunks.iter().map(|(_, file)| (*file).to_owned()).collect(),
            vectors: vec![0.0; chunks.len()],
        })
    }

    #[test]
    fn only_the_chunks_the_results_hold_are_read() {
        let sources = vec![
            ("vs_a".to_owned(), vectors(&[(1, "f1"), (2, "f1"), (3, "f1"), (4, "f1"), (5, "f2"), (6, "f3")])),
            ("vs_b".to_owned(), vectors(&[(7, "f1"), (8, "f4")])),
        ];
        let file = |store: &str, id: &str| SearchableFile {
            vector_store_id: store.into(),
            file_id: id.into(),
            filename: format!("{id}.txt"),
            attributes: serde_json::json!({}),
        };
        // f4 is filtered out; f1 is in both stores, a different result in each.
        let files = [file("vs_a", "f1"), file("vs_a", "f2"), file("vs_a", "f3"), file("vs_b", "f1")];
        let by_file: HashMap<(&str, &str), &SearchableFile> =
            files.iter().map(|f| ((f.vector_store_id.as_str(), f.file_id.as_str()), f)).collect();
        let ranked: Vec<(i64, f64)> = [1, 8, 2, 7, 3, 4, 5, 6].iter().map(|id| (*id, 1.0 / *id as f64)).collect();
        let places = chunk_places(&ranked, &sources).unwrap();
        // vs_a/f1 keeps three chunks (4 is one too many), vs_b/f1 is the second file; f2 would be
        // a third file, over the limit of two.
        assert_eq!(held_chunks(&ranked, &places, &by_file, 2), [1, 2, 7, 3]);
        assert_eq!(held_chunks(&ranked, &places, &by_file, 10), [1, 2, 7, 3, 5, 6]);
        // A ranked chunk the vectors do not know: every ranked chunk is read.
        assert!(chunk_places(&[(1, 1.0), (99, 0.5)], &sources).is_none());
    }

    #[test]
    fn dot_matches_the_plain_sum_for_any_length() {
        for len in [0, 1, 7, 8, 9, 384, 1001] {
            let a: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..len).map(|i| (i as f32 * 0.11).cos()).collect();
            let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - plain).abs() < 1e-3, "{len}");
        }
    }

    #[test]
    fn the_scan_keeps_the_k_nearest_allowed_chunks() {
        let vectors = StoreVectors {
            generation: 1,
            dimensions: 2,
            chunk_ids: vec![10, 11, 12, 13],
            file_ids: vec!["a".into(), "b".into(), "a".into(), "c".into()],
            vectors: vec![1.0, 0.0, 0.8, 0.6, 0.0, 1.0, 0.6, 0.8],
        };
        let mut best = BinaryHeap::new();
        top_k_into(&[1.0, 0.0], &vectors, 2, |_| true, &mut best);
        let mut ids: Vec<i64> = best.into_iter().map(|c| c.chunk_id).collect();
        ids.sort();
        assert_eq!(ids, vec![10, 11]);
        let mut best = BinaryHeap::new();
        top_k_into(&[1.0, 0.0], &vectors, 2, |i| vectors.file_ids[i] != "a", &mut best);
        let mut ids: Vec<i64> = best.into_iter().map(|c| c.chunk_id).collect();
        ids.sort();
        assert_eq!(ids, vec![11, 13]);
    }

    #[test]
    fn fusion_scores_first_everywhere_as_one() {
        let scores: HashMap<i64, f64> = fused_scores(&[(1.0, vec![1, 2, 3]), (1.0, vec![1, 3])]).into_iter().collect();
        assert!((scores[&1] - 1.0).abs() < 1e-12);
        // Second in one list, absent from the other.
        assert!((scores[&2] - (1.0 / 62.0) / (2.0 / 61.0)).abs() < 1e-12);
        assert!(scores[&3] > scores[&2]);
    }

    #[test]
    fn weights_decide_which_list_leads_the_fusion() {
        // The lexical list ranks 1 first, the vector list 2: the heavier list's first wins.
        let lexical_heavy: HashMap<i64, f64> =
            fused_scores(&[(3.0, vec![1, 2]), (1.0, vec![2, 1])]).into_iter().collect();
        assert!(lexical_heavy[&1] > lexical_heavy[&2]);
        let vector_heavy: HashMap<i64, f64> =
            fused_scores(&[(1.0, vec![1, 2]), (3.0, vec![2, 1])]).into_iter().collect();
        assert!(vector_heavy[&2] > vector_heavy[&1]);
        // A list of weight 0 counts for nothing; first in the others is still 1.
        let text_only: HashMap<i64, f64> = fused_scores(&[(1.0, vec![1, 2]), (0.0, vec![2, 1])]).into_iter().collect();
        assert!((text_only[&1] - 1.0).abs() < 1e-12);
        assert!((text_only[&2] - (61.0 / 62.0)).abs() < 1e-12);
    }

    #[test]
    fn lexical_scores_are_relative_to_each_querys_best() {
        let scores: HashMap<i64, f64> =
            lexical_scores(&[vec![(1, 8.0), (2, 4.0)], vec![(2, 3.0)]]).into_iter().collect();
        assert!((scores[&1] - 0.5).abs() < 1e-12);
        assert!((scores[&2] - 0.75).abs() < 1e-12);
    }
}
