// Parses an AsyncAPI document with @asyncapi/parser (the AsyncAPI
// Initiative's parser: JSON Schema validation against the spec, $ref
// resolution, and its Spectral rules) and exits 1 on any error-severity
// diagnostic. On success it prints one line:
//   ok: N channels, N operations, N messages
// Usage: node validate.mjs /abs/path/to/asyncapi.yaml
import { Parser, fromFile } from '@asyncapi/parser';

const file = process.argv[2];
if (!file) {
  console.error('usage: node validate.mjs FILE');
  process.exit(2);
}
const parser = new Parser();
const { document, diagnostics } = await fromFile(parser, file).parse({
  validateOptions: { allowedSeverity: { warning: true, info: true, hint: true } },
});
// Severity: 0 error, 1 warning, 2 info, 3 hint.
for (const d of diagnostics) {
  const sev = ['error', 'warning', 'info', 'hint'][d.severity] ?? d.severity;
  console.log(`${sev}: ${d.code}: ${d.message} at ${d.path.join('.')}`);
}
const errors = diagnostics.filter((d) => d.severity === 0);
if (!document || errors.length > 0) {
  console.error(`${errors.length} error(s) in ${file}`);
  process.exit(1);
}
console.log(`ok: ${document.channels().length} channels, ${document.operations().length} operations, ${document.messages().length} messages`);
