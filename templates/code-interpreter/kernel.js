// Cove's JavaScript kernel for the code-interpreter template: one Node.js process per
// context, started by server.py as `node kernel.js FD`. FD is a connected socket: requests
// arrive on it as JSON lines `{code, env_vars}`; every message goes back on it as a JSON line
// (`stdout`, `stderr`, `result`, `error`, then `end_of_execution`), the same protocol as
// server.py's Python worker. Written for Cove; standard library only, plus Debian's
// `node-acorn` (a dependency of Debian's nodejs) for top-level `await`.
//
// A cell runs as a script in this process's global context (`vm.runInThisContext`), so its
// globals (`var`, functions, assignments, and `let`/`const`/`class` in the global lexical
// scope) stay for the next cell. The script's completion value, when not `undefined`, is the
// result (`util.inspect` text, as Node's REPL shows it). A cell with top-level `await` is
// rewritten into an async function whose top-level declarations become global assignments
// and whose last expression is returned. SIGINT interrupts a running cell (synchronous code
// through `breakOnSigint`, a pending `await` through the handler below).
'use strict'

const fs = require('fs')
const net = require('net')
const path = require('path')
const util = require('util')
const vm = require('vm')
const { createRequire } = require('module')
const { pathToFileURL } = require('url')

const FD = Number(process.argv[2])
const MAX_LINE = 64 * 1024 * 1024
const CELL_FILE = '<cell>'

// Loaded at the first cell with top-level await (a context starts faster without it).
let acorn
function loadAcorn() {
  if (acorn === undefined) {
    try {
      acorn = require('acorn')
    } catch (_) {
      // Without acorn a cell with top-level await is a SyntaxError, as in a plain script.
      acorn = null
    }
  }
  return acorn
}

// Messages are written synchronously, so they keep their order with the cell's own work and
// a cell that prints without end waits for the server to read. The socket is non-blocking
// (reading it below makes it so): a full socket buffer means a 1 ms sleep and a retry.
const pause = new Int32Array(new SharedArrayBuffer(4))
function writeAll(data) {
  let buf = Buffer.from(data)
  while (buf.length > 0) {
    let n
    try {
      n = fs.writeSync(FD, buf)
    } catch (e) {
      if (e.code === 'EAGAIN') {
        Atomics.wait(pause, 0, 0, 1)
        continue
      }
      // The server is gone: nothing is left to report to.
      process.exit(0)
    }
    buf = buf.subarray(n)
  }
}

function send(msg) {
  writeAll(JSON.stringify(msg) + '\n')
}

function output(kind, text) {
  if (text.length > 0) send({ type: kind, text, timestamp: Date.now() * 1000 })
}

// console.* and process.stdout/stderr.write become output messages, in order with results.
for (const [stream, kind] of [[process.stdout, 'stdout'], [process.stderr, 'stderr']]) {
  stream.write = function (chunk, encoding, cb) {
    if (typeof encoding === 'function') {
      cb = encoding
      encoding = undefined
    }
    const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString(encoding || 'utf8')
    output(kind, text)
    if (typeof cb === 'function') process.nextTick(cb)
    return true
  }
}

// `import()` needs node's `--experimental-vm-modules` (server.py passes it); its notice that
// the feature is experimental is not the cell's output. Other warnings print as usual.
const emitWarning = process.emitWarning
process.emitWarning = function (warning, ...rest) {
  const type = typeof rest[0] === 'string' ? rest[0] : rest[0] && rest[0].type
  if (type === 'ExperimentalWarning' && /VM Modules/i.test(String(warning))) return
  return emitWarning.call(process, warning, ...rest)
}

// Errors of callbacks that outlive their cell are printed, never fatal to the context.
process.on('uncaughtException', (e) => output('stderr', `Uncaught ${describe(e).traceback}\n`))
process.on('unhandledRejection', (e) => output('stderr', `Uncaught (in promise) ${describe(e).traceback}\n`))

// `require` resolves from the context's directory, as a script there would.
globalThis.require = createRequire(path.join(process.cwd(), '__cove_cell__.js'))

// A pending `await` is interrupted by SIGINT (synchronous code by breakOnSigint instead).
let interrupt = null
process.on('SIGINT', () => {
  if (interrupt) interrupt()
})

class Interrupted extends Error {}

function cleanStack(stack) {
  // The traceback starts at the cell: frames of this file and of Node's internals go.
  const self = __filename
  return stack
    .split('\n')
    .filter((line) => !(/^\s+at /.test(line) && (line.includes(self) || /\(node:|\bnode:[a-z]/.test(line))))
    .join('\n')
}

function describe(e) {
  if (e instanceof Error || (e && typeof e === 'object' && typeof e.stack === 'string')) {
    const name = e.name || (e.constructor && e.constructor.name) || 'Error'
    const value = typeof e.message === 'string' ? e.message : String(e)
    return { name, value, traceback: cleanStack(String(e.stack || `${name}: ${value}`)) }
  }
  const value = util.inspect(e)
  return { name: 'Error', value, traceback: `Uncaught ${value}` }
}

// Names bound by a declaration pattern (`a`, `{b, c: [d]}`, `...e`, `f = 1`).
function patternNames(node, out) {
  if (!node) return out
  switch (node.type) {
    case 'Identifier': out.push(node.name); break
    case 'ObjectPattern': for (const p of node.properties) patternNames(p.type === 'RestElement' ? p.argument : p.value, out); break
    case 'ArrayPattern': for (const el of node.elements) patternNames(el, out); break
    case 'AssignmentPattern': patternNames(node.left, out); break
    case 'RestElement': patternNames(node.argument, out); break
  }
  return out
}

// Rewrites a cell with top-level `await` into `(async () => { ... })()`, keeping its line
// numbers: top-level `var`/`let`/`const` become assignments (globals, in sloppy mode),
// `class X` becomes `X = class X`, functions are copied onto globalThis, and the last
// expression statement is returned. null when the cell does not parse with await either.
function rewriteTopLevelAwait(code) {
  if (!loadAcorn()) return null
  let ast
  try {
    ast = acorn.parse(code, { ecmaVersion: 'latest', sourceType: 'script', allowAwaitOutsideFunction: true, allowHashBang: true })
  } catch (_) {
    return null
  }
  const edits = [] // [start, end, text], non-overlapping
  const functions = []
  const body = ast.body
  const src = (n) => code.slice(n.start, n.end)
  body.forEach((stmt, i) => {
    const last = i === body.length - 1
    if (stmt.type === 'VariableDeclaration') {
      const parts = stmt.declarations.map((d) => {
        if (d.init) return `${src(d.id)} = ${src(d.init)}`
        return patternNames(d.id, []).map((n) => `${n} = undefined`).join(', ')
      }).filter((p) => p.length > 0)
      edits.push([stmt.start, stmt.end, parts.length ? `(${parts.join(', ')});` : ';'])
    } else if (stmt.type === 'ClassDeclaration') {
      edits.push([stmt.start, stmt.end, `${stmt.id.name} = ${src(stmt)};`])
    } else if (stmt.type === 'FunctionDeclaration') {
      functions.push(stmt.id.name)
    } else if (stmt.type === 'ExpressionStatement' && last) {
      edits.push([stmt.start, stmt.end, `return (${src(stmt.expression)});`])
    }
  })
  let out = code
  for (const [start, end, text] of edits.sort((a, b) => b[0] - a[0])) {
    out = out.slice(0, start) + text + out.slice(end)
  }
  const hoisted = functions.map((n) => `globalThis[${JSON.stringify(n)}] = ${n};`).join(' ')
  return `(async () => {${hoisted} ${out}\n})()`
}

// `import()` in a cell: packages and relative paths resolve from the context's directory as
// `require` does (then load as ES modules or CommonJS alike); `node:` builtins as they are.
function importModule(specifier) {
  let target = specifier
  if (!specifier.startsWith('node:') && !require('module').isBuiltin(specifier)) {
    try {
      target = pathToFileURL(globalThis.require.resolve(specifier)).href
    } catch (_) {
      // An ES-module-only package (no `require` export): Node's own resolution from here.
    }
  }
  return import(target)
}

const SCRIPT_OPTIONS = { filename: CELL_FILE, importModuleDynamically: importModule }

function compile(code) {
  try {
    return { script: new vm.Script(code, SCRIPT_OPTIONS), async: false }
  } catch (e) {
    if (!(e instanceof SyntaxError) || !/\bawait\b/.test(code)) throw e
    const rewritten = rewriteTopLevelAwait(code)
    if (rewritten === null) throw e
    return { script: new vm.Script(rewritten, SCRIPT_OPTIONS), async: true }
  }
}

async function runCell(code) {
  const { script, async } = compile(code)
  let value = script.runInThisContext({ breakOnSigint: true, displayErrors: false })
  if (async) {
    value = await new Promise((resolve, reject) => {
      interrupt = () => reject(new Interrupted())
      value.then(resolve, reject)
    }).finally(() => {
      interrupt = null
    })
  }
  return value
}

async function execute(req) {
  const saved = {}
  for (const [k, v] of Object.entries(req.env_vars || {})) {
    saved[k] = Object.prototype.hasOwnProperty.call(process.env, k) ? process.env[k] : undefined
    process.env[k] = String(v)
  }
  try {
    const value = await runCell(req.code)
    if (value !== undefined) {
      globalThis._ = value
      send({ type: 'result', is_main_result: true, text: util.inspect(value) })
    }
  } catch (e) {
    if (e instanceof Interrupted || (e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED')) {
      send({ type: 'error', name: 'Interrupted', value: 'the execution was interrupted', traceback: 'Interrupted: the execution was interrupted' })
    } else {
      send({ type: 'error', ...describe(e) })
    }
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k]
      else process.env[k] = v
    }
    send({ type: 'end_of_execution' })
  }
}

// Requests, one JSON line each, run one at a time in order.
let pending = Buffer.alloc(0)
let queue = Promise.resolve()
// A socket stream, not fs reads: a read blocked in libuv's thread pool would keep a cell's
// `process.exit()` from ending the process.
const input = new net.Socket({ fd: FD, readable: true, writable: false })
input.on('data', (chunk) => {
  pending = Buffer.concat([pending, chunk])
  let nl
  while ((nl = pending.indexOf(10)) >= 0) {
    const line = pending.subarray(0, nl).toString()
    pending = pending.subarray(nl + 1)
    const req = JSON.parse(line)
    queue = queue.then(() => execute(req))
  }
  if (pending.length > MAX_LINE) process.exit(1)
})
input.on('end', () => process.exit(0))
input.on('error', () => process.exit(0))
