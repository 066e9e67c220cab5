// Receives ONE message (waiting up to 10 s) and hands it to @5app/sns-sqs-big-payload's
// SqsConsumer.processMessage in the mode compatible with Amazon's SQS extended client
// (extendedLibraryCompatibility, getPayloadFromS3), which resolves an S3 pointer and then deletes
// the SQS message. It prints one JSON line:
//   {"received":true, "messageId":..., "rawBody":..., "attributes":{...}, "resolved":...,
//    "bucket":..., "key":..., "size":..., "sha256":..., "objectExists":..., "deleted":...,
//    "errors":[...]}
// or {"received":false} when no message came. size and sha256 describe the body the library
// handed its handler (the payload when it resolved the pointer, else the SQS body).
//
//   node receive.mjs <endpoint> <queue-url> <bucket>
//
// The ReceiveMessage call is this script's, asking for all message attributes so that it can
// report them; the library's own poll loop asks for SQSLargePayloadSize only. The library never
// deletes S3 objects (it has no code that does): objectExists checks, with HeadObject afterwards,
// the object that the pointer names. bucket is the bucket the payload is expected in: a pointer
// to another is reported in errors.
import { createHash } from "node:crypto";
import { args, clients, loadLibrary, print, region } from "./lib.mjs";

const [endpoint, queueUrl, bucket] = args("receive.mjs", ["endpoint", "queue-url", "bucket"]);
const { SqsConsumer, SqsConsumerEvents } = await loadLibrary();
const { sqs, s3 } = clients(endpoint);

// pointerOf returns the bucket and key of an extended-client pointer body, or null.
function pointerOf(body) {
  try {
    const v = JSON.parse(body);
    if (Array.isArray(v) && v.length === 2 && typeof v[1]?.s3BucketName === "string" && typeof v[1]?.s3Key === "string") {
      return { bucket: v[1].s3BucketName, key: v[1].s3Key };
    }
  } catch {}
  return null;
}

async function exists(b, k) {
  try {
    await s3.headObject({ Bucket: b, Key: k });
    return true;
  } catch (err) {
    if (err?.$metadata?.httpStatusCode === 404 || err?.name === "NotFound" || err?.name === "NoSuchKey") return false;
    throw err;
  }
}

try {
  const out = await sqs.receiveMessage({
    QueueUrl: queueUrl,
    MaxNumberOfMessages: 1,
    WaitTimeSeconds: 10,
    MessageAttributeNames: ["All"],
  });
  const message = out.Messages?.[0];
  if (!message) {
    print({ received: false });
  } else {
    const errors = [];
    let handled = null;
    const consumer = SqsConsumer.create({
      queueUrl,
      region,
      sqs,
      s3,
      getPayloadFromS3: true,
      extendedLibraryCompatibility: true,
      handleMessage: async ({ payload, s3PayloadMeta }) => {
        handled = { payload, s3PayloadMeta };
      },
    });
    for (const ev of [
      SqsConsumerEvents.s3PayloadError,
      SqsConsumerEvents.s3extendedPayloadError,
      SqsConsumerEvents.processingError,
      SqsConsumerEvents.payloadParseError,
    ]) {
      // processMessage does not throw: it reports failures only through these events.
      consumer.on(ev, (e) => errors.push(`${ev}: ${e?.err?.message ?? e?.message ?? String(e)}`));
    }
    let deleted = false;
    consumer.on(SqsConsumerEvents.messageProcessed, () => {
      deleted = true; // emitted after the library's DeleteMessage succeeded
    });
    await consumer.processMessage(message, { deleteAfterProcessing: true });

    const result = {
      received: true,
      messageId: message.MessageId,
      rawBody: message.Body,
      attributes: Object.fromEntries(
        Object.entries(message.MessageAttributes ?? {}).map(([name, a]) => [name, { dataType: a.DataType, stringValue: a.StringValue }]),
      ),
      resolved: Boolean(handled?.s3PayloadMeta),
      deleted,
      errors,
    };
    if (handled) {
      const body = Buffer.from(String(handled.payload), "utf8");
      result.size = body.length;
      result.sha256 = createHash("sha256").update(body).digest("hex");
    }
    const ptr = handled?.s3PayloadMeta ? { bucket: handled.s3PayloadMeta.Bucket, key: handled.s3PayloadMeta.Key } : pointerOf(message.Body);
    if (ptr) {
      result.bucket = ptr.bucket;
      result.key = ptr.key;
      if (ptr.bucket !== bucket) errors.push(`the pointer names bucket ${ptr.bucket}, not ${bucket}`);
      result.objectExists = await exists(ptr.bucket, ptr.key);
    }
    print(result);
  }
} finally {
  sqs.destroy();
  s3.destroy();
}
