// Times Sandbox.create() + commands.run('echo hi') through the npm `e2b` SDK, N rounds after
// one warm-up; prints the durations in ms as a JSON array (read by bench_create_run.py).
import { createRequire } from 'node:module'

const require = createRequire(process.env.E2B_NODE_MODULES + '/')
const { Sandbox } = require('e2b')
const n = Number(process.argv[2] || 20)

async function round () {
  const t = performance.now()
  const sbx = await Sandbox.create()
  const r = await sbx.commands.run('echo hi')
  const took = performance.now() - t
  if (r.stdout !== 'hi\n') throw new Error(`unexpected stdout ${JSON.stringify(r.stdout)}`)
  await sbx.kill()
  return took
}

await round()
const times = []
for (let i = 0; i < n; i++) times.push(await round())
console.log(JSON.stringify(times))
