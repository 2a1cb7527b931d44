// E2B JavaScript SDK (npm `e2b`) against Cove: create, run, files, kill; file metadata, the
// network rules and their update (as the sandbox info reads them back; traffic is tested from
// Python against a fake internet), snapshots and fork, volumes. Run by scripts/test-e2b.sh through
// node_runner.py with node's test runner; the server address comes from E2B_* variables.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'

const require = createRequire(process.env.E2B_NODE_MODULES + '/')
const { Sandbox, Volume, CommandExitError, NotFoundError, ALL_TRAFFIC } = require('e2b')

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

test('file metadata, network rules, snapshots and fork', async () => {
  const sbx = await Sandbox.create({ network: { denyOut: [ALL_TRAFFIC], allowOut: ['allowed.test'] } })
  try {
    let info = await sbx.getInfo()
    assert.deepEqual(info.network.allowOut, ['allowed.test'])
    assert.deepEqual(info.network.denyOut, [ALL_TRAFFIC])
    await sbx.updateNetwork({ denyOut: ['203.0.113.0/24'] })
    info = await sbx.getInfo()
    assert.deepEqual(info.network.denyOut, ['203.0.113.0/24'])

    const written = await sbx.files.write('/home/user/meta.txt', 'm', { metadata: { Kind: 'note' } })
    assert.deepEqual(written.metadata, { kind: 'note' })
    assert.deepEqual((await sbx.files.getInfo('/home/user/meta.txt')).metadata, { kind: 'note' })

    const snap = await sbx.createSnapshot({ name: 'js-snap' })
    assert.ok(snap.snapshotId.startsWith('ck-'))
    assert.deepEqual(snap.names, ['js-snap'])
    const child = await Sandbox.create(snap.snapshotId)
    try {
      assert.equal(await child.files.read('/home/user/meta.txt'), 'm')
    } finally {
      await child.kill()
    }
    const [fork] = await sbx.fork()
    try {
      assert.ok(fork instanceof Sandbox)
      assert.equal(await fork.files.read('/home/user/meta.txt'), 'm')
    } finally {
      await fork.kill()
    }
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
  } finally {
    await sbx.kill()
  }
})

test('volumes: create, mount, share, destroy', async () => {
  const name = 'js-vol-' + Math.random().toString(36).slice(2, 10)
  const vol = await Volume.create(name)
  assert.equal(vol.volumeId, name)
  assert.ok((await Volume.list()).some((v) => v.volumeId === name))
  const writer = await Sandbox.create({ volumeMounts: { '/mnt/v': vol } })
  try {
    await writer.files.write('/mnt/v/js.txt', 'on the volume')
  } finally {
    await writer.kill()
  }
  const reader = await Sandbox.create({ volumeMounts: { '/data': name } })
  try {
    assert.equal(await reader.files.read('/data/js.txt'), 'on the volume')
  } finally {
    await reader.kill()
  }
  assert.equal(await Volume.destroy(name), true)
  assert.equal(await Volume.destroy(name), false)
})

// PID 1's start time: a new one after a reboot (a runc sandbox shares the host's boot id).
const boot = async (sbx) => (await sbx.commands.run("cut -d' ' -f22 /proc/1/stat")).stdout.trim()
const sleeping = async (sbx, pid) =>
  (await sbx.commands.run(`tr '\\0' ' ' < /proc/${pid}/cmdline 2>/dev/null || true`)).stdout.trim() === 'sleep 600'

test('betaPause keeps processes; a filesystem pause and onResume reboot cold-boot', async () => {
  const sbx = await Sandbox.create()
  try {
    const bg = await sbx.commands.run('sleep 600', { background: true })
    const first = await boot(sbx)
    assert.equal(await sbx.betaPause(), true)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
    let back = await Sandbox.connect(sbx.sandboxId)
    assert.equal(await sleeping(back, bg.pid), true)
    assert.equal(await boot(back), first)

    assert.equal(await back.pause({ keepMemory: false }), true)
    back = await Sandbox.connect(sbx.sandboxId)
    assert.equal(await sleeping(back, bg.pid), false)
    const second = await boot(back)
    assert.notEqual(second, first)

    const bg2 = await back.commands.run('sleep 600', { background: true })
    assert.equal(await back.betaPause(), true)
    back = await Sandbox.connect(sbx.sandboxId, { onResume: 'reboot' })
    assert.equal(await sleeping(back, bg2.pid), false)
    assert.notEqual(await boot(back), second)
  } finally {
    await sbx.kill()
  }
})
