#!/usr/bin/env node
/**
 * Generate the panel's TypeScript protocol types from the one JSON Schema
 * (`jupyterlab_torchdbg/protocol/messages.schema.json`), so the two sides
 * cannot drift apart.
 *
 *   node scripts/gen-protocol-types.mjs           write src/protocol/generated.ts
 *   node scripts/gen-protocol-types.mjs --check   fail when that file is stale (CI)
 *
 * The output is committed source (formatted with the project's prettier
 * settings); `src/protocol/messages.ts` re-exports it under the names the rest
 * of `src/` uses. Change the schema, then run `jlpm gen:protocol`.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { compile } from 'json-schema-to-typescript';
import prettier from 'prettier';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SCHEMA = 'jupyterlab_torchdbg/protocol/messages.schema.json';
const OUTPUT = 'src/protocol/generated.ts';

const BANNER = `/**
 * GENERATED FILE, DO NOT EDIT.
 *
 * The protocol's message types, generated from ${SCHEMA}
 * by scripts/gen-protocol-types.mjs (json-schema-to-typescript). Change the schema,
 * then run \`jlpm gen:protocol\`; \`jlpm gen:protocol:check\` fails when this file is stale.
 * Import from \`./messages\`, which re-exports these under the panel's names.
 */`;

/**
 * Names of the `$defs` entries: objects get the `I` prefix of the project's
 * interface convention (`Hello` -> `IHello`); unions, scalars and `tsType`
 * overrides keep theirs (`KernelMessage`, `Bytes`, `NoArgs`).
 */
function nameOf(defs, key) {
  return !defs[key].tsType && isObjectLike(defs, defs[key]) ? `I${key}` : key;
}

function isObjectLike(defs, schema, seen = new Set()) {
  if (!schema || typeof schema !== 'object' || seen.has(schema)) {
    return false;
  }
  seen.add(schema);
  if (schema.$ref) {
    return isObjectLike(defs, defs[refKey(schema.$ref)], seen);
  }
  if (schema.type === 'object' || schema.properties) {
    return true;
  }
  return (schema.allOf ?? []).some(s => isObjectLike(defs, s, seen));
}

function refKey(ref) {
  const prefix = '#/$defs/';
  if (!ref.startsWith(prefix)) {
    throw new Error(`unexpected $ref ${ref} (only local $defs are used)`);
  }
  return ref.slice(prefix.length);
}

/**
 * Shape the schema for the generator (in memory only; the schema file is the
 * contract and stays as it is).
 */
function prepare(source) {
  const schema = structuredClone(source);
  const defs = schema.$defs;

  // Nested objects carry a `title` so that the Python generator names them
  // (`ClipArgs`); here they stay inline types, as the panel reads them through
  // their message (`IActionClip['args']`). (A string `title` is a schema
  // keyword; a property named "title" is an object.)
  for (const def of Object.values(defs)) {
    stripTitles(def);
  }

  // `Action` holds its envelope (`properties`) and its per-action variants
  // (`oneOf`) in one schema; the generator would name the second part
  // `Action1`. Name both parts: IAction = IActionEnvelope & ActionVariant.
  const { oneOf, description, ...envelope } = defs.Action;
  defs.ActionEnvelope = envelope;
  defs.ActionVariant = {
    description: 'One allowlisted action with its own argument schema.',
    oneOf
  };
  defs.Action = {
    description,
    allOf: [
      { $ref: '#/$defs/ActionEnvelope' },
      { $ref: '#/$defs/ActionVariant' }
    ]
  };

  // Each action's result (`x-result` of its definition, a JSON Schema keyword
  // the generator ignores): one map, action name -> result type, so that
  // `sendAction<K>` resolves to `IActionResults[K]`. An action without one
  // keeps an open object.
  const results = {};
  for (const variant of oneOf) {
    const def = defs[refKey(variant.$ref)];
    const name = def.properties.action.const;
    results[name] = def['x-result'] ?? { type: 'object' };
    delete def['x-result'];
  }
  defs.ActionResults = {
    description:
      "Each action's `result` in its `ack`, by action name (the schema's `x-result`).",
    type: 'object',
    required: Object.keys(results),
    additionalProperties: false,
    properties: results
  };

  for (const def of Object.values(defs)) {
    // An object that must stay empty: `{}` would accept anything.
    if (def.type === 'object' && def.maxProperties === 0) {
      def.tsType = 'Record<string, never>';
    }
    // `allOf: [{$ref: X}, {required: [...]}]` makes fields of X required;
    // the generator would drop the second part (`X & {[k: string]: unknown}`).
    if (def.allOf) {
      const base = def.allOf.find(s => s.$ref);
      def.allOf = def.allOf.map(s => {
        const keys = Object.keys(s);
        if (base && keys.length === 1 && keys[0] === 'required') {
          const fields = s.required.map(f => JSON.stringify(f)).join(' | ');
          return {
            tsType: `Required<Pick<${nameOf(defs, refKey(base.$ref))}, ${fields}>>`
          };
        }
        return s;
      });
    }
  }
  return schema;
}

function stripTitles(node) {
  if (Array.isArray(node)) {
    node.forEach(stripTitles);
  } else if (node && typeof node === 'object') {
    if (typeof node.title === 'string') {
      delete node.title;
    }
    Object.values(node).forEach(stripTitles);
  }
}

async function generate() {
  const source = JSON.parse(fs.readFileSync(path.join(ROOT, SCHEMA), 'utf-8'));
  const schema = prepare(source);
  const defs = schema.$defs;
  const ts = await compile(schema, 'ProtocolMessage', {
    bannerComment: BANNER,
    cwd: path.join(ROOT, path.dirname(SCHEMA)),
    // every $defs entry, referenced or not (ActionEnvelope, NullableNumber, ...)
    unreachableDefinitions: true,
    // `minItems`/`maxItems` as tuples would spell out up to 15 elements
    ignoreMinAndMaxItems: true,
    strictIndexSignatures: false,
    unknownAny: true,
    format: false,
    // A $defs entry arrives with its key as `keyNameFromDefinition`, or, once
    // dereferenced from a `$ref`, with the key as its `$id`.
    customName: (s, keyNameFromDefinition) => {
      if (s.$id === schema.$id) {
        return 'ProtocolMessage';
      }
      const key = keyNameFromDefinition ?? s.$id;
      return key && key in defs ? nameOf(defs, key) : undefined;
    }
  });
  // `ActionResults` is referenced by no message: compile it on its own, its
  // references named as above. The result types no message names
  // (`IClipResult`, ...) are declared here; a type the first pass declared
  // already (`IReplayResult`, `IGradThresholds`) is only referred to by name.
  const declared = new Set(
    [...ts.matchAll(/^export (?:interface|type) (\w+)/gm)].map(m => m[1])
  );
  const byName = node => {
    if (Array.isArray(node)) {
      return node.map(byName);
    }
    if (!node || typeof node !== 'object') {
      return node;
    }
    if (node.$ref && declared.has(nameOf(defs, refKey(node.$ref)))) {
      const { $ref, ...rest } = node;
      return { ...rest, tsType: nameOf(defs, refKey($ref)) };
    }
    return Object.fromEntries(
      Object.entries(node).map(([k, v]) => [k, byName(v)])
    );
  };
  const resultDefs = Object.fromEntries(
    Object.entries(defs)
      .filter(([key]) => !declared.has(nameOf(defs, key)))
      .map(([key, def]) => [key, byName(def)])
  );
  const results = await compile(
    {
      $id: 'ActionResults',
      $defs: resultDefs,
      ...byName(defs.ActionResults)
    },
    'IActionResults',
    {
      bannerComment: '',
      cwd: path.join(ROOT, path.dirname(SCHEMA)),
      declareExternallyReferenced: true,
      ignoreMinAndMaxItems: true,
      strictIndexSignatures: false,
      unknownAny: true,
      format: false,
      customName: (s, keyNameFromDefinition) => {
        if (s.$id === 'ActionResults') {
          return 'IActionResults';
        }
        const key = keyNameFromDefinition ?? s.$id;
        return key && key in defs ? nameOf(defs, key) : undefined;
      }
    }
  );
  // the version, in one place: the schema's `x-protocol-version`
  const version = `
/** The protocol version: the schema's \`x-protocol-version\`. */
export const PROTOCOL_VERSION = ${JSON.stringify(source['x-protocol-version'])};
`;
  const target = path.join(ROOT, OUTPUT);
  const config = (await prettier.resolveConfig(target)) ?? {};
  return prettier.format(ts + results + version, {
    ...config,
    filepath: target
  });
}

async function main() {
  const check = process.argv.includes('--check');
  const fresh = await generate();
  const target = path.join(ROOT, OUTPUT);
  if (!check) {
    fs.writeFileSync(target, fresh);
    console.log(`wrote ${OUTPUT}`);
    return;
  }
  const tmp = path.join(
    fs.mkdtempSync(path.join(os.tmpdir(), 'torchdbg-protocol-')),
    'generated.ts'
  );
  fs.writeFileSync(tmp, fresh);
  const current = fs.existsSync(target) ? fs.readFileSync(target, 'utf-8') : '';
  if (current !== fresh) {
    console.error(
      `${OUTPUT} is stale: it does not match ${SCHEMA}.\n` +
        `Run \`jlpm gen:protocol\` and commit the result ` +
        `(freshly generated copy: ${tmp}; compare with \`diff ${OUTPUT} ${tmp}\`).`
    );
    process.exit(1);
  }
  fs.rmSync(path.dirname(tmp), { recursive: true, force: true });
  console.log(`${OUTPUT} is up to date with ${SCHEMA}.`);
}

main().catch(e => {
  console.error(e);
  process.exit(2);
});
