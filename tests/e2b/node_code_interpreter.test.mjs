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
