// Builds the console into dist/ (or the directory given as the first argument) (checked in, embedded in the cove binary by crates/console):
// src/main.js bundled with its npm dependencies (xterm.js) into one minified script, the styles
// (xterm's included) into one sheet, and index.html copied. Deterministic: the same sources and
// lockfile give the same bytes, so scripts/test-console.sh can check that dist/ is current.
import { build } from "esbuild";
import { copyFileSync, mkdirSync } from "node:fs";

const out = process.argv[2] || "dist";
mkdirSync(out, { recursive: true });
const common = { bundle: true, minify: true, legalComments: "eof", logLevel: "warning" };
await build({
  ...common,
  entryPoints: ["src/main.js"],
  outfile: `${out}/console.js`,
  format: "iife",
  target: ["chrome110", "firefox110", "safari16"],
});
await build({ ...common, entryPoints: ["src/style.css"], outfile: `${out}/console.css` });
copyFileSync("src/index.html", `${out}/index.html`);
