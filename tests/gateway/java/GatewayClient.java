// An unmodified Java Kafka client (org.apache.kafka:kafka-clients, default settings unless said) for the
// gateway tests. Prints one line per event on stdout, flushed, for the test to read:
//   produce BOOTSTRAP TOPIC RUN N [PROPERTY=VALUE ...] -> "acked VALUE PARTITION OFFSET" / "failed VALUE ERROR",
//                                                       then "done"
//   stream BOOTSTRAP TOPIC RUN [PROPERTY=VALUE ...] -> as produce, about 2,000 messages a second until stdin
//                                                      closes
//   consume BOOTSTRAP TOPIC GROUP RUN [PROPERTY=VALUE ...] -> "got VALUE PARTITION OFFSET", "assigned P,P",
//                                                            "revoked P,P";
//                                        stops (commits and leaves) when stdin closes.
import java.io.PrintStream;
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Collectors;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class GatewayClient {
    private static final PrintStream OUT = System.out;
    /** Milliseconds between two messages produced (0: bursts of 100 every 50 ms). */
    private static final long PACE_MS = Long.parseLong(System.getenv().getOrDefault("GATEWAY_CLIENT_PACE_MS", "0"));

    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "produce" -> produce(args[1], args[2], args[3], Integer.parseInt(args[4]),
                                      java.util.Arrays.copyOfRange(args, 5, args.length));
            case "stream" -> produce(args[1], args[2], args[3], -1, java.util.Arrays.copyOfRange(args, 4, args.length));
            case "consume" -> consume(args[1], args[2], args[3], args[4],
                                      java.util.Arrays.copyOfRange(args, 5, args.length));
            default -> throw new IllegalArgumentException("produce or consume, not " + args[0]);
        }
    }

    /** n messages, or (n < 0) until stdin closes. */
    static void produce(String bootstrap, String topic, String run, int n, String[] extra) throws Exception {
        AtomicBoolean stop = new AtomicBoolean();
        if (n < 0) stopOnStdinClose(stop, null);
        Properties p = new Properties();
        for (String kv : extra) p.put(kv.substring(0, kv.indexOf('=')), kv.substring(kv.indexOf('=') + 1));
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("linger.ms", "5");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; n < 0 ? !stop.get() : i < n; i++) {
                String key = i % 2 == 1 ? "key-" + (i % 23) : null;
                String value = run + "-" + i;
                producer.send(new ProducerRecord<>(topic, key, value), (md, e) -> {
                    synchronized (OUT) {
                        if (e == null) OUT.println("acked " + value + " " + md.partition() + " " + md.offset());
                        else OUT.println("failed " + value + " " + e.getClass().getSimpleName());
                        OUT.flush();
                    }
                });
                if (PACE_MS > 0) Thread.sleep(PACE_MS);  // a steady stream (the chaos run's)
                else if (i % 100 == 0) Thread.sleep(50);  // a stream over time, not one burst
            }
            producer.flush();
        }
        synchronized (OUT) {
            OUT.println("done");
            OUT.flush();
        }
    }

    static String partitions(Collection<TopicPartition> ps) {
        return ps.stream().map(tp -> Integer.toString(tp.partition())).sorted().collect(Collectors.joining(","));
    }

    static void consume(String bootstrap, String topic, String group, String run, String[] extra) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("auto.offset.reset", "earliest");
        p.put("session.timeout.ms", "6000");
        p.put("heartbeat.interval.ms", "500");
        for (String kv : extra) p.put(kv.substring(0, kv.indexOf('=')), kv.substring(kv.indexOf('=') + 1));
        KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p);
        AtomicBoolean stop = new AtomicBoolean();
        stopOnStdinClose(stop, consumer::wakeup);
        consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
            // What Kafka's documentation asks of a consumer under the cooperative protocol, which goes on
            // consuming while it rebalances: commit what was read before a partition goes to another member.
            public void onPartitionsRevoked(Collection<TopicPartition> ps) {
                if (ps.isEmpty()) return;
                try {
                    consumer.commitSync(Duration.ofSeconds(5));  // bounded: a sub-cluster may be down
                } catch (Exception e) {
                    line("uncommitted " + e.getClass().getSimpleName());
                }
                line("revoked " + partitions(ps));
            }
            public void onPartitionsAssigned(Collection<TopicPartition> ps) { line("assigned " + partitions(ps)); }
        });
        try {
            while (!stop.get()) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    if (r.value() != null && r.value().startsWith(run)) {
                        OUT.println("got " + r.value() + " " + r.partition() + " " + r.offset());
                    }
                }
                OUT.flush();
            }
        } catch (WakeupException e) {
            // stdin closed: leave
        } finally {
            consumer.close();
            line("closed");
        }
    }

    static void stopOnStdinClose(AtomicBoolean stop, Runnable then) {
        Thread watcher = new Thread(() -> {
            try {
                while (System.in.read() >= 0) { }
            } catch (Exception ignored) { }
            stop.set(true);
            if (then != null) then.run();
        });
        watcher.setDaemon(true);
        watcher.start();
    }

    static void line(String s) {
        OUT.println(s);
        OUT.flush();
    }
}
