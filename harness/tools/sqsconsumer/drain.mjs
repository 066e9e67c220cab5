// drain.mjs: sqs-consumer draining a queue until <n> messages were handled and deleted, then
// stopping; it prints one JSON line ({"handled": n, "errors": e}). The handler does nothing: what
// is measured is the SQS requests the library makes, which workerbench counts in front of the
// server.
//
//   node drain.mjs <endpoint> <queueUrl> <n> <mode>
//
// mode:
//   default    the library's defaults: batchSize 1, handleMessage (a receive and a DeleteMessage
//              a message)
//   message10  batchSize 10, handleMessage: a receive's messages handled together, each deleted
//              with a DeleteMessage of its own
//   batch10    batchSize 10, handleMessageBatch: one DeleteMessageBatch a receive
import { Consumer } from "sqs-consumer";
import { SQSClient } from "@aws-sdk/client-sqs";

const got = process.argv.slice(2);
const modes = { default: { batchSize: 1 }, message10: { batchSize: 10 }, batch10: { batchSize: 10, batch: true } };
if (got.length !== 4 || !(got[3] in modes) || !(Number(got[2]) > 0)) {
  process.stderr.write("usage: node drain.mjs <endpoint> <queueUrl> <n> default|message10|batch10\n");
  process.exit(2);
}
const [endpoint, queueUrl, nArg, modeName] = got;
const n = Number(nArg);
const mode = modes[modeName];
const sqs = new SQSClient({ endpoint, region: "us-east-1", credentials: { accessKeyId: "test", secretAccessKey: "test" } });

let handled = 0;
let errors = 0;
const opts = { queueUrl, sqs, batchSize: mode.batchSize, waitTimeSeconds: 1 };
if (mode.batch) {
  opts.handleMessageBatch = async (messages) => messages;
} else {
  opts.handleMessage = async (message) => message;
}
const consumer = Consumer.create(opts);
const finished = new Promise((resolve) => {
  consumer.on("message_processed", () => {
    handled++;
    if (handled === n) resolve();
  });
});
for (const ev of ["error", "processing_error", "timeout_error"]) {
  consumer.on(ev, (err) => {
    errors++;
    process.stderr.write(`${ev}: ${err && err.message}\n`);
  });
}
const deadline = setTimeout(() => {
  process.stderr.write(`drain.mjs: ${handled} of ${n} handled in 5 minutes\n`);
  process.exit(1);
}, 5 * 60 * 1000);
consumer.start();
await finished;
clearTimeout(deadline);
consumer.stop({ abort: true });
process.stdout.write(JSON.stringify({ handled, errors }) + "\n");
process.exit(0);
