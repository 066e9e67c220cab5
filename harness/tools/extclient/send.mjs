// Sends ONE message through @5app/sns-sqs-big-payload's SqsProducer, in the mode compatible with
// Amazon's SQS extended client (extendedLibraryCompatibility) and always through S3
// (allPayloadThoughS3), and prints one JSON line:
//   {"messageId":..., "bucket":..., "key":..., "size":..., "sha256":...}
// where size and sha256 describe the S3 object, the payload as stored.
//
//   node send.mjs <endpoint> <queue-url> <bucket> <body-file>
//
// The library sends JSON values only (sendJSON): the file must hold one JSON document, and the
// payload it stores is JSON.stringify of it, so the same bytes when the file is compact JSON as
// JSON.stringify writes it.
import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { args, clients, loadLibrary, print, region } from "./lib.mjs";

const [endpoint, queueUrl, bucket, file] = args("send.mjs", ["endpoint", "queue-url", "bucket", "body-file"]);
const text = await readFile(file, "utf8");
let value;
try {
  value = JSON.parse(text);
} catch (err) {
  process.stderr.write(`send.mjs: ${file} is not JSON (${err.message}); the library sends JSON values only\n`);
  process.exit(2);
}
const { SqsProducer } = await loadLibrary();
const { sqs, s3 } = clients(endpoint);
try {
  const producer = SqsProducer.create({
    queueUrl,
    region,
    sqs,
    s3,
    s3Bucket: bucket,
    allPayloadThoughS3: true,
    extendedLibraryCompatibility: true,
  });
  const { s3Response, sqsResponse } = await producer.sendJSON(value);
  const stored = Buffer.from(JSON.stringify(value), "utf8"); // what sendJSON uploads
  print({
    messageId: sqsResponse.MessageId,
    bucket: s3Response.Bucket,
    key: s3Response.Key,
    size: stored.length,
    sha256: createHash("sha256").update(stored).digest("hex"),
  });
} finally {
  sqs.destroy();
  s3.destroy();
}
