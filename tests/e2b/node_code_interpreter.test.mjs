// E2B's Code Interpreter JavaScript SDK (npm `@e2b/code-interpreter`), unchanged, against Cove's
// `code-interpreter-v1` template. Run by test_code_interpreter.py (which builds the template)
// with node's test runner; the server address comes from E2B_* variables.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'

const require = createRequire(process.env.E2B_NODE_MODULES + '/')
const { Sandbox } = require('@e2b/code-interpreter')

test('runCode: results, output, errors, charts, contexts', async () => {
  const sbx = await Sandbox.create()
  try {
    const one = await sbx.runCode('1+1')
    assert.equal(one.text, '2')
    const lines = []
    const out = await sbx.runCode("print('from js')", { onStdout: (m) => lines.push(m.line) })
    assert.deepEqual(out.logs.stdout, ['from js\n'])
    assert.deepEqual(lines, ['from js\n'])
    const failed = await sbx.runCode('1/0')
    assert.equal(failed.error.name, 'ZeroDivisionError')
    assert.match(failed.error.traceback, /ZeroDivisionError/)
    const chart = await sbx.runCode(
      "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.show()"
    )
    const png = chart.results.find((r) => r.png)
    assert.ok(png, JSON.stringify(chart.error))
    assert.ok(Buffer.from(png.png, 'base64').subarray(0, 4).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47])))
    const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
    assert.equal((await sbx.runCode('import os; os.getcwd()', { context: ctx })).text, "'/tmp'")
    const env = await sbx.runCode("os.environ.get('JS_VAR')", { context: ctx, envs: { JS_VAR: 'v' } })
    assert.equal(env.text, "'v'")
    await sbx.removeCodeContext(ctx)
  } finally {
    await sbx.kill()
  }
})

test("runCode with language 'javascript': results, console.log, errors, contexts", async () => {
  const sbx = await Sandbox.create()
  try {
    assert.equal((await sbx.runCode('1+1', { language: 'javascript' })).text, '2')
    await sbx.runCode('globalThis.total = 1; let step = 2', { language: 'javascript' })
    const lines = []
    const out = await sbx.runCode("console.log('total', total); total += step; total", {
      language: 'javascript',
      onStdout: (m) => lines.push(m.line),
    })
    assert.deepEqual(out.logs.stdout, ['total 1\n'])
    assert.deepEqual(lines, ['total 1\n'])
    assert.equal(out.text, '3')
    const failed = await sbx.runCode("throw new RangeError('too far')", { language: 'javascript' })
    assert.equal(failed.error.name, 'RangeError')
    assert.equal(failed.error.value, 'too far')
    assert.match(failed.error.traceback, /RangeError: too far/)
    const awaited = await sbx.runCode("const v = await new Promise((r) => setTimeout(() => r('late'), 10))\nv", { language: 'js' })
    assert.equal(awaited.text, "'late'")
    const ctx = await sbx.createCodeContext({ language: 'javascript', cwd: '/tmp' })
    assert.equal(ctx.language, 'javascript')
    assert.equal((await sbx.runCode('process.cwd()', { context: ctx })).text, "'/tmp'")
    assert.equal((await sbx.runCode('typeof total', { context: ctx })).text, "'undefined'")
    const env = await sbx.runCode('process.env.JS_VAR', { context: ctx, envs: { JS_VAR: 'v' } })
    assert.equal(env.text, "'v'")
    await sbx.removeCodeContext(ctx)
    // Python beside it, in the same sandbox.
    assert.equal((await sbx.runCode('2 ** 10')).text, '1024')
  } finally {
    await sbx.kill()
  }
})
