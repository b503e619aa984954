#!/usr/bin/env node
// Loads a trace into Perfetto's own trace processor and prints the result of SQL queries.
//
//   node trace_processor.js ENGINE_DIR TRACE SQL...
//
// ENGINE_DIR holds engine_bundle.js and trace_processor.wasm from a published build of
// the Perfetto UI, v20.1 (tests/setup/55-perfetto-ui.sh fetches it from the npm
// registry): the WebAssembly trace processor that the UI runs in a worker, here driven
// from Node through its RPC entry points. Prints one JSON line per query:
// {"columns": [...], "rows": [[...], ...]} or {"error": "..."}; exits 1 if the trace
// cannot be parsed or a query fails.
'use strict';
const fs = require('fs');
const path = require('path');
const vm = require('vm');

const [engineDir, tracePath, ...queries] = process.argv.slice(2);
if (!engineDir || !tracePath || queries.length === 0) {
  console.error('usage: trace_processor.js ENGINE_DIR TRACE SQL...');
  process.exit(2);
}
const trace = fs.readFileSync(path.resolve(tracePath));

// --- The few protobuf messages of the RPC (perfetto.protos.TraceProcessorRpcStream). ---
// Field numbers as in the bundle's generated encoders: stream.msg = 1; rpc.seq = 1,
// request = 2, response = 3, invalid_request = 4, fatal_error = 5,
// append_trace_data = 101, query_args = 103 (sql_query = 1), append_result = 201
// (error = 2), query_result = 203 (column_names = 1, error = 2, batch = 3).
const TPM_APPEND_TRACE_DATA = 1, TPM_FINALIZE_TRACE_DATA = 2, TPM_QUERY_STREAMING = 3;

function varint(n) {
  const out = [];
  let v = BigInt(n);
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v > 0n) b |= 0x80;
    out.push(b);
  } while (v > 0n);
  return Buffer.from(out);
}
const field = (num, wire) => varint((num << 3) | wire);
const lenField = (num, bytes) => Buffer.concat([field(num, 2), varint(bytes.length), bytes]);
const intField = (num, v) => Buffer.concat([field(num, 0), varint(v)]);

function request(seq, method, args) {
  const rpc = Buffer.concat([intField(1, seq), intField(2, method), args || Buffer.alloc(0)]);
  return lenField(1, rpc);
}

// Reads the varint at `at.pos` of `buf` and moves `at.pos` past it.
function readVarint(buf, at) {
  let v = 0n, shift = 0n;
  for (;;) {
    const b = buf[at.pos++];
    if (b === undefined) throw new Error('truncated varint in an RPC reply');
    v |= BigInt(b & 0x7f) << shift;
    if (b < 0x80) return v;
    shift += 7n;
  }
}

// Reads every field of a message: [{num, wire, value (BigInt or Buffer)}].
function fields(buf) {
  const out = [];
  const at = { pos: 0 };
  const take = (n) => buf.subarray(at.pos, (at.pos += n));
  while (at.pos < buf.length) {
    const key = Number(readVarint(buf, at));
    const num = key >>> 3, wire = key & 7;
    if (wire === 0) out.push({ num, wire, value: readVarint(buf, at) });
    else if (wire === 2) out.push({ num, wire, value: take(Number(readVarint(buf, at))) });
    else if (wire === 1) out.push({ num, wire, value: take(8) });
    else if (wire === 5) out.push({ num, wire, value: take(4) });
    else throw new Error(`wire type ${wire} in an RPC reply`);
  }
  return out;
}

// A packed repeated int64 field: signed values.
function packedVarints(buf) {
  const out = [];
  const at = { pos: 0 };
  while (at.pos < buf.length) out.push(BigInt.asIntN(64, readVarint(buf, at)));
  return out;
}

// --- The engine: the bundle expects to run as a Web Worker with a MessagePort. ---
process.chdir(path.resolve(engineDir)); // the bundle finds trace_processor.wasm beside it
globalThis.require = require;
globalThis.__dirname = process.cwd();
const out = (line) => process.stdout.write(line + '\n');
console.log = console.error; // the engine's own messages ("Loading trace ...") go to stderr
const replies = [];
const port = { postMessage: (data) => replies.push(Buffer.from(data)), onmessage: null };
globalThis.self = { onmessage: null };
vm.runInThisContext(fs.readFileSync('engine_bundle.js', 'utf8'), { filename: 'engine_bundle.js' });

let seq = 0;
// Sends one request and returns the RPC messages it produced (synchronously: the wasm
// answers from inside the call).
function call(method, args) {
  replies.length = 0;
  port.onmessage({ data: new Uint8Array(request(seq++, method, args)) });
  const msgs = [];
  for (const r of replies) for (const f of fields(r)) if (f.num === 1) msgs.push(fields(f.value));
  for (const m of msgs) {
    const fatal = m.find((f) => f.num === 5);
    if (fatal) throw new Error(`trace processor: ${fatal.value.toString()}`);
    if (m.find((f) => f.num === 4)) throw new Error(`trace processor refused request ${method}`);
  }
  return msgs;
}

function query(sql) {
  const columns = [], rows = [];
  let error = null, row = [];
  for (const m of call(TPM_QUERY_STREAMING, lenField(103, lenField(1, Buffer.from(sql))))) {
    const result = m.find((f) => f.num === 203);
    if (!result) continue;
    for (const f of fields(result.value)) {
      if (f.num === 1) columns.push(f.value.toString());
      else if (f.num === 2) error = f.value.toString();
      else if (f.num === 3) {
        const batch = fields(f.value);
        const cells = batch.filter((b) => b.num === 1).flatMap((b) => packedVarints(b.value).map(Number));
        const ints = batch.filter((b) => b.num === 2).flatMap((b) => packedVarints(b.value));
        const floats = batch.filter((b) => b.num === 3).flatMap((b) => {
          const v = [];
          for (let i = 0; i < b.value.length; i += 8) v.push(b.value.readDoubleLE(i));
          return v;
        });
        const strs = batch.filter((b) => b.num === 5).flatMap((b) => b.value.toString().split('\0'));
        let [ni, nf, ns] = [0, 0, 0];
        for (const c of cells) {
          // CellType: NULL 1, VARINT 2, FLOAT64 3, STRING 4, BLOB 5.
          let v = null;
          if (c === 2) {
            const i = ints[ni++];
            v = Number.isSafeInteger(Number(i)) ? Number(i) : i;
          } else if (c === 3) v = floats[nf++];
          else if (c === 4) v = strs[ns++];
          row.push(v);
          if (row.length === columns.length) { rows.push(row); row = []; }
        }
      }
    }
  }
  return error === null ? { columns, rows } : { error };
}

// The bundle compiles the wasm synchronously and finishes its set-up in a promise that
// resolves before any timer runs: after one turn of the event loop it takes requests.
setImmediate(() => {
  self.onmessage({ data: { enginePort: port } });
  for (const m of call(TPM_APPEND_TRACE_DATA, lenField(101, trace))) {
    const res = m.find((f) => f.num === 201);
    const err = res && fields(res.value).find((f) => f.num === 2);
    if (err) {
      console.error(`${tracePath}: Perfetto could not parse it: ${err.value}`);
      process.exitCode = 1;
      return;
    }
  }
  call(TPM_FINALIZE_TRACE_DATA);
  let failed = false;
  for (const sql of queries) {
    const r = query(sql);
    failed ||= 'error' in r;
    // Integers past 2^53 (epoch ns) are printed exactly, as JSON numbers: a BigInt goes
    // through a marked string that is unquoted afterwards.
    const text = JSON.stringify(r, (_, v) => (typeof v === 'bigint' ? `\u0000big${v}` : v));
    out(text.replace(/"\\u0000big(-?\d+)"/g, '$1'));
  }
  // Not process.exit(): it would cut the output short where stdout is a pipe.
  process.exitCode = failed ? 1 : 0;
});
