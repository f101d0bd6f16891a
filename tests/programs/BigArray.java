// A heap of long[] chunks (MIB of them, 1 MiB each) filled with a hash of
// their index, then OPS pseudo-random reads and writes that also replace a
// chunk now and then (garbage for the collector). Prints a checksum on
// stdout; on stderr, the process's peak resident set (VmHWM) and the time
// spent, so a test can bound the memory the JVM kept local.
//
// usage: java BigArray MIB OPS [FULLGCS]: FULLGCS full collections
// (System.gc()) at the end, each timed on stderr.
import java.nio.file.Files;
import java.nio.file.Paths;

public class BigArray {
    public static void main(String[] a) throws Exception {
        int mib = Integer.parseInt(a[0]);
        long ops = Long.parseLong(a[1]);
        int chunk = 1 << 17; // longs per MiB
        long t0 = System.nanoTime();
        long[][] c = new long[mib][];
        for (int i = 0; i < mib; i++) {
            c[i] = new long[chunk];
            for (int j = 0; j < chunk; j++) c[i][j] = mix((long) i * chunk + j);
        }
        long x = 88172645463325252L, sum = 0;
        for (long k = 0; k < ops; k++) {
            x ^= x << 13; x ^= x >>> 7; x ^= x << 17;
            int i = (int) Long.remainderUnsigned(x, mib);
            int j = (int) Long.remainderUnsigned(x >>> 20, chunk);
            sum += c[i][j];
            c[i][j] = mix(sum + k);
            if ((k & 0xFFFF) == 0) c[i] = c[i].clone();
        }
        long all = 0;
        for (int i = 0; i < mib; i++) for (int j = 0; j < chunk; j += 61) all += c[i][j];
        System.out.println("sum " + sum + " all " + all);
        int full = a.length > 2 ? Integer.parseInt(a[2]) : 0;
        for (int g = 0; g < full; g++) {
            long f0 = System.nanoTime();
            System.gc();
            System.err.printf("bigarray fullgc seconds %.3f%n", (System.nanoTime() - f0) / 1e9);
        }
        // The chunks stay live through the collections above.
        long again = 0;
        for (int i = 0; i < mib; i += 7) again += c[i][i % chunk];
        System.err.println("bigarray after " + again);
        for (String l : Files.readAllLines(Paths.get("/proc/self/status"))) {
            if (l.startsWith("VmHWM:")) System.err.println("bigarray " + l.replaceAll("\\s+", " "));
        }
        System.err.printf("bigarray seconds %.3f%n", (System.nanoTime() - t0) / 1e9);
    }

    static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
        z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
        return z ^ (z >>> 31);
    }
}
