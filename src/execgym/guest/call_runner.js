// The function-call harness for JavaScript, run INSIDE the sandbox by node.
//
// The same protocol as call_runner.py: START_MARKER on fd 3 first; stdin holds
// "EXECGYM-CALL1 <nonce> <fn_name> <program bytes> <ms>\n", the program, then the cases
// as JSON. stdin is read whole and closed (so /proc/self/fd/0 cannot be re-read), the
// program is loaded with require/module in scope, fn_name is found (a function; else a
// method of class Solution, a fresh instance per case; "Class.method" names one), and
// one report is written to fd 3: the nonce on a line, then the JSON object. Results are
// encoded by the harness from plain values only (null, booleans, numbers, strings,
// arrays and plain objects); the nonce lives in this closure, out of the program's reach.
'use strict';
const fs = require('fs');
(function main() {
  const writeSync = fs.writeSync, stringify = JSON.stringify, parse = JSON.parse;
  const getProto = Object.getPrototypeOf, ownKeys = Object.keys;
  const ArrayProto = Array.prototype, ObjectProto = Object.prototype;
  const exit = process.exit.bind(process);
  writeSync(3, 'EXECGYM-START\n');
  const data = fs.readFileSync(0);
  fs.closeSync(0);
  const newline = data.indexOf(10);
  const header = data.subarray(0, newline).toString('utf8').split(' ');
  const nonce = header[1], fnName = header[2], size = Number(header[3]);
  const program = data.subarray(newline + 1, newline + 1 + size).toString('utf8');
  const cases = parse(data.subarray(newline + 1 + size).toString('utf8'));

  function encode(value, depth) {
    if (depth > 200) throw new TypeError('the result is nested too deeply');
    if (value === null || value === undefined) return 'null';
    const kind = typeof value;
    if (kind === 'boolean') return value ? 'true' : 'false';
    if (kind === 'number') {
      if (value !== value) return 'NaN';
      if (value === Infinity) return 'Infinity';
      if (value === -Infinity) return '-Infinity';
      return '' + value;
    }
    if (kind === 'bigint') return '' + value;
    if (kind === 'string') return stringify(value);
    if (kind === 'object') {
      const proto = getProto(value);
      if (proto === ArrayProto) {
        const parts = [];
        for (let i = 0; i < value.length; i++) parts.push(encode(value[i], depth + 1));
        return '[' + parts.join(', ') + ']';
      }
      if (proto === ObjectProto || proto === null) {
        const parts = [];
        for (const key of ownKeys(value)) {
          parts.push(stringify('' + key) + ': ' + encode(value[key], depth + 1));
        }
        return '{' + parts.join(', ') + '}';
      }
    }
    throw new TypeError('the result is a ' + kind + ', not plain data (JSON)');
  }
  function failure(error) {
    const name = error && typeof error === 'object' ? '' + error.name : typeof error;
    const message = error && typeof error === 'object' ? '' + error.message : '' + error;
    return '"error": ' + stringify(name) + ', "message": ' + stringify(message.slice(0, 2000));
  }
  function report(body) {
    writeSync(3, nonce + '\n' + body + '\n');
    exit(0);
  }

  const dot = fnName.lastIndexOf('.');
  const owner = dot >= 0 ? fnName.slice(0, dot) : '', method = fnName.slice(dot + 1);
  const probe = '\n;return {f: typeof ' + method + " === 'undefined' ? undefined : " + method +
    ', S: typeof ' + (owner || 'Solution') + " === 'undefined' ? undefined : " +
    (owner || 'Solution') + '};';
  const solutionModule = {exports: {}};
  let found;
  try {
    found = new Function('require', 'module', 'exports', program + probe)(
      require, solutionModule, solutionModule.exports);
  } catch (error) {
    report('{"status": "load_error", ' + failure(error) + '}');
  }
  let target = owner ? undefined : found.f;
  let holder;
  const isClass = (f) => typeof f === 'function' && /^class\b/.test(Function.prototype.toString.call(f));
  if (typeof target !== 'function' || isClass(target)) {
    target = undefined;
    if (typeof found.S === 'function' && typeof found.S.prototype[method] === 'function') {
      holder = found.S;
    }
  }
  if (target === undefined && holder === undefined) {
    report('{"status": "not_found", "error": "EntryPointNotFound", "message": ' +
      stringify('no function or Solution method named ' + fnName) + '}');
  }
  const results = [];
  for (const item of cases) {
    try {
      const args = item.args.slice();
      const value = holder !== undefined ? new holder()[method](...args) : target(...args);
      results.push('{"value": ' + encode(value, 0) + '}');
    } catch (error) {
      results.push('{' + failure(error) + '}');
    }
  }
  report('{"status": "ok", "results": [' + results.join(', ') + ']}');
})();
