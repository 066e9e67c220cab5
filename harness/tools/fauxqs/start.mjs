// Starts fauxqs for the sqsinbox tests (harness/sqstest): on loopback only, without request logs,
// on the port given as the first argument (0, the default, lets the kernel pick a free one). Its
// CLI would listen on every interface and log each request. The one line it prints tells the
// harness the address.
import { buildApp } from "fauxqs";

const app = buildApp({ logger: false });
const address = await app.listen({ port: Number(process.argv[2] ?? 0), host: "127.0.0.1" });
process.stdout.write(`fauxqs listening on ${address}\n`);
