// Runs one load scenario on its own thread so the load generator does not share the event loop
// with the gateway it measures.
import { parentPort, workerData } from "node:worker_threads";
import { runLoad, type LoadOptions } from "./load.js";

const options = workerData as LoadOptions;
parentPort!.postMessage(await runLoad(options));
