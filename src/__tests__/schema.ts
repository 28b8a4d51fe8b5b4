/**
 * The protocol's JSON Schema (the one source of truth, shared with the Python side)
 * loaded once for the jest specs: `schemaDef('Memory')` is a validator of that `$defs`
 * entry, with `errors` after a failed call.
 */
import Ajv2020, { ValidateFunction } from 'ajv/dist/2020';
import * as fs from 'fs';
import * as path from 'path';

export const schemaPath = path.resolve(
  __dirname,
  '../../jupyterlab_torchdbg/protocol/messages.schema.json'
);
export const schema = JSON.parse(fs.readFileSync(schemaPath, 'utf-8'));

const ajv = new Ajv2020({ strict: false, allErrors: true });
ajv.addSchema(schema, 'protocol');

export function schemaDef(def: string): ValidateFunction {
  const v = ajv.getSchema(`protocol#/$defs/${def}`);
  if (!v) {
    throw new Error(`no $defs/${def} in the protocol schema`);
  }
  return v;
}
