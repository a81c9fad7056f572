// JavaScript baseline for bench/bench_cost.py: graphql-query-complexity's getComplexity.
//
// Usage: node --expose-gc complexity.mjs <corpus dir>
//
// Builds the corpus schema, parses each query ONCE, then times getComplexity in-process the same
// way bench/_harness.py times Python code: calibrate the loops per sample so one sample takes
// 20-50 ms, warm up, take SAMPLES samples (a minor GC before each when --expose-gc is given) and
// report the median microseconds per operation. Prints one JSON object on stdout:
//   {"small": us, "medium": us, "large": us, "cost": {"small": n, ...}, "meta": {...}}

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { hrtime } from "node:process";

import { buildSchema, parse, version as graphqlVersion } from "graphql";
import {
  fieldExtensionsEstimator,
  getComplexity,
  simpleEstimator,
} from "graphql-query-complexity";

const QUERIES = ["small", "medium", "large"];
const SAMPLES = 7;
const MIN_SAMPLE_NS = 20e6; // calibration stops once a sample takes at least 20 ms
const TARGET_SAMPLE_NS = 30e6; // then aims at 30 ms per sample

function sampleNs(fn, loops) {
  // A minor GC clears the previous sample's young garbage. A forced full gc() is NOT used: samples
  // taken right after one measured 2-3x slower here (V8's forced GC is memory-reducing), which
  // would flatter quotaql in the ratios.
  if (globalThis.gc) globalThis.gc({ type: "minor" });
  const start = hrtime.bigint();
  for (let i = 0; i < loops; i++) fn();
  return Number(hrtime.bigint() - start);
}

function calibrate(fn) {
  let loops = 1;
  for (;;) {
    const elapsed = sampleNs(fn, loops);
    if (elapsed >= MIN_SAMPLE_NS) {
      return Math.max(1, Math.round((loops * TARGET_SAMPLE_NS) / elapsed));
    }
    loops *= elapsed > 0 ? Math.min(10, Math.max(2, Math.ceil(MIN_SAMPLE_NS / elapsed))) : 10;
  }
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

function medianMicros(fn) {
  const loops = calibrate(fn);
  sampleNs(fn, loops); // one more full sample so the JIT has settled before we record
  const perOp = [];
  for (let i = 0; i < SAMPLES; i++) perOp.push(sampleNs(fn, loops) / loops / 1e3);
  return median(perOp);
}

function main() {
  const corpus = process.argv[2];
  if (!corpus) {
    console.error("usage: node complexity.mjs <corpus dir>");
    process.exit(2);
  }
  const schema = buildSchema(readFileSync(join(corpus, "schema.graphql"), "utf8"));
  const estimators = [fieldExtensionsEstimator(), simpleEstimator({ defaultComplexity: 1 })];
  const result = { cost: {} };
  for (const name of QUERIES) {
    const query = parse(readFileSync(join(corpus, `${name}.graphql`), "utf8"));
    const variables = JSON.parse(readFileSync(join(corpus, `${name}.variables.json`), "utf8"));
    const run = () => getComplexity({ estimators, schema, query, variables });
    result.cost[name] = run();
    result[name] = medianMicros(run);
  }
  // The package's "exports" map hides package.json, so read the installed copy directly.
  const gqc = new URL("./node_modules/graphql-query-complexity/package.json", import.meta.url);
  result.meta = {
    node: process.version,
    graphql: graphqlVersion,
    "graphql-query-complexity": JSON.parse(readFileSync(gqc, "utf8")).version,
    gc: Boolean(globalThis.gc),
    samples: SAMPLES,
  };
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

main();
