// The plotly.js modules autopar's reports draw: scatter (in core), bar and parcoords.
// Same registration pattern as plotly.js's own lib/index-basic.js partial bundle.
var Plotly = require('plotly.js/lib/core');

Plotly.register([require('plotly.js/lib/bar'), require('plotly.js/lib/parcoords')]);

module.exports = Plotly;
