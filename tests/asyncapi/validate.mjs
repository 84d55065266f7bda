// Validates an AsyncAPI document with the AsyncAPI Initiative's parser: the document against the
// specification's schema and rules, every $ref resolved (the payload schemas under schemas/).
// Prints each diagnostic; exits 1 on any error.
//
//   node validate.mjs ../../docs/events/asyncapi.yaml
import { resolve } from "node:path";
import { Parser, fromFile } from "@asyncapi/parser";

const SEVERITY = ["error", "warning", "info", "hint"];
const { document, diagnostics } = await fromFile(new Parser(), resolve(process.argv[2])).parse();
for (const d of diagnostics) {
  console.error(`${SEVERITY[d.severity]} ${d.code}: ${d.message} at ${d.path.join(".")}`);
}
if (document === undefined || diagnostics.some((d) => d.severity === 0)) process.exit(1);
const messages = document.allMessages().all();
const fields = messages.reduce((n, m) => n + Object.keys(m.payload()?.properties() ?? {}).length, 0);
console.log(`valid AsyncAPI ${document.version()}: ${document.channels().length} channels, ` +
  `${messages.length} messages, ${fields} payload fields resolved`);
