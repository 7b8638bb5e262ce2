// Restate TypeScript SDK service for the benchmark's shapes (plain ES module: no compile step).
if (typeof Promise.withResolvers !== "function") {
  // Node 20 lacks it; the SDK calls it (Node 22 has it)
  Promise.withResolvers = function () {
    let resolve, reject;
    const promise = new Promise((res, rej) => { resolve = res; reject = rej; });
    return { promise, resolve, reject };
  };
}
const restate = await import("@restatedev/restate-sdk");

const step = (i) => i;

const bench = restate.service({
  name: "BenchTs",
  handlers: {
    // n durable steps one after another
    chain: async (ctx, n) => {
      for (let i = 0; i < n; i++) await ctx.run("s", () => step(i));
      return n;
    },
    // n durable steps, at most `width` in flight (a sliding window through RestatePromise.race:
    // the SDK refuses plain concurrent awaits of ctx.run)
    loop: async (ctx, req) => {
      const { n, width } = req;
      const slots = [];
      let next = 0;
      const start = (k) => { const i = next++; return ctx.run("s", () => step(i)).map(() => k); };
      while (next < n && slots.length < width) slots.push(start(slots.length));
      let live = slots.length;
      while (live > 0) {
        const k = await restate.RestatePromise.race(slots.filter((p) => p !== null));
        if (next < n) slots[k] = start(k); else { slots[k] = null; live--; }
      }
      return n;
    },
  },
});

restate.endpoint().bind(bench).listen(parseInt(process.argv[2], 10));
