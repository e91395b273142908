// Bundles ADC's CLI (apps/cli/src/main.ts) with its workspace libraries into one file, as
// its Nx build does with esbuild, without Nx.
import { build } from 'esbuild';
import { readdirSync } from 'node:fs';

const alias = {};
for (const lib of readdirSync('libs')) {
  alias[`@api7/adc-${lib}`] = `./libs/${lib}/src/index.ts`;
}
alias['@api7/adc-sdk/schema'] = './libs/sdk/src/core/schema.ts';
// ADC imports commander's default export, which only its CommonJS entry has.
alias['commander'] = './node_modules/commander/index.js';
await build({
  entryPoints: ['apps/cli/src/main.ts'],
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node18',
  outfile: 'dist/adc.cjs',
  alias,
  logLevel: 'warning',
});
