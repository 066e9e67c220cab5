// What send.mjs and receive.mjs share: loading the library, and SDK clients for the endpoint
// given (path-style S3, region us-east-1, credentials test/test: a local emulator's).
import module from "node:module";
import { S3 } from "@aws-sdk/client-s3";
import { SQS } from "@aws-sdk/client-sqs";
import { resolve } from "./hooks.mjs";

export const region = "us-east-1";
const credentials = { accessKeyId: "test", secretAccessKey: "test" };

// loadLibrary imports @5app/sns-sqs-big-payload once the resolve hook (hooks.mjs) is in place.
export async function loadLibrary() {
  if (typeof module.registerHooks === "function") {
    module.registerHooks({ resolve });
  } else {
    module.register("./hooks.mjs", import.meta.url);
  }
  return import("@5app/sns-sqs-big-payload");
}

// clients returns the aggregated SQS and S3 clients the library calls (sqs.sendMessage,
// s3.getObject, ...), both pointed at endpoint.
export function clients(endpoint) {
  const sqs = new SQS({ endpoint, region, credentials });
  const s3 = new S3({ endpoint, region, credentials, forcePathStyle: true });
  return { sqs, s3 };
}

// args returns the command line arguments named, or exits 2 naming the missing ones.
export function args(script, names) {
  const got = process.argv.slice(2);
  if (got.length !== names.length || got.some((a) => a === "")) {
    process.stderr.write(`usage: node ${script} ${names.map((n) => `<${n}>`).join(" ")}\n`);
    process.exit(2);
  }
  return got;
}

// print writes v as one JSON line on stdout.
export function print(v) {
  process.stdout.write(JSON.stringify(v) + "\n");
}
