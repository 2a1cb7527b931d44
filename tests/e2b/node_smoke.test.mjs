// E2B JavaScript SDK (npm `e2b`) against Cove: create, run, files, kill. Run by
// run-e2b-tests.sh with node's test runner; the server address comes from E2B_* variables.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'

const require = createRequire(process.env.E2B_NODE_MODULES + '/')
const { Sandbox, CommandExitError, NotFoundError } = require('e2b')

test('create, run, files, kill', async () => {
  const sbx = await Sandbox.create({ metadata: { sdk: 'js' }, envs: { FROM: 'js' } })
  try {
    const r = await sbx.commands.run('echo hello from $FROM; whoami')
    assert.equal(r.stdout, 'hello from js\nuser\n')
    assert.equal(r.exitCode, 0)
    await assert.rejects(sbx.commands.run('exit 4'), (e) => e instanceof CommandExitError && e.exitCode === 4)

    const bg = await sbx.commands.run('sleep 60', { background: true })
    assert.ok((await sbx.commands.list()).some((p) => p.pid === bg.pid))
    assert.equal(await bg.kill(), true)

    await sbx.files.write('/home/user/js.txt', 'written by js')
    assert.equal(await sbx.files.read('/home/user/js.txt'), 'written by js')
    const names = (await sbx.files.list('/home/user')).map((e) => e.name)
    assert.ok(names.includes('js.txt'))
    assert.equal(await sbx.files.exists('/home/user/none.txt'), false)

    const info = await sbx.getInfo()
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.deepEqual(info.metadata, { sdk: 'js' })
  } finally {
    assert.equal(await sbx.kill(), true)
  }
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), (e) => e instanceof NotFoundError || /not found/i.test(String(e)))
})
