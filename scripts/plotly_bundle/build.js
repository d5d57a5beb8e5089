// Build autopar's partial plotly.js bundle with the esbuild settings of plotly.js's own build
// (plotly.js esbuild-config.js: IIFE global `Plotly`, inline CSS, GLSL, regl alias, es2016),
// minified, then gzip it (level 9) into autopar/reports/assets/.
//   cd scripts/plotly_bundle && npm install --ignore-scripts && node build.js
const esbuild = require('esbuild');
const { environmentPlugin } = require('esbuild-plugin-environment');
const { glsl } = require('esbuild-plugin-glsl');
const InlineCSSPlugin = require('esbuild-plugin-inline-css');
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');

const out = path.join(__dirname, '..', '..', 'autopar', 'reports', 'assets');
esbuild
    .build({
        entryPoints: [path.join(__dirname, 'entry.js')],
        format: 'iife',
        globalName: 'Plotly',
        bundle: true,
        minify: true,
        write: false,
        plugins: [InlineCSSPlugin(), glsl({ minify: true }), environmentPlugin({ NODE_DEBUG: false })],
        alias: { regl: '@plotly/regl', stream: 'stream-browserify' },
        define: { global: 'window', 'define.amd': 'false' },
        target: 'es2016',
        legalComments: 'inline',
        logLevel: 'info',
    })
    .then((res) => {
        const js = res.outputFiles[0].contents;
        const version = require('plotly.js/package.json').version;
        fs.mkdirSync(out, { recursive: true });
        fs.writeFileSync(path.join(out, 'plotly-partial.min.js.gz'), zlib.gzipSync(js, { level: 9, mtime: 0 }));
        fs.writeFileSync(
            path.join(out, 'plotly-partial.json'),
            JSON.stringify({ plotly_js: version, traces: ['scatter', 'bar', 'parcoords'], bytes: js.length }, null, 1) + '\n'
        );
        fs.copyFileSync(require.resolve('plotly.js/LICENSE'), path.join(out, 'PLOTLY_LICENSE'));
        console.log(`plotly.js ${version}: ${js.length} bytes minified`);
    });
