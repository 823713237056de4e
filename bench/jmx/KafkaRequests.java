// The embedded broker's request counters over JMX, for bench/counters.py (ADR 024).
// Run as a single-file program: java KafkaRequests.java 127.0.0.1:PORT
// Every line read on stdin prints one line: "Produce=123 Fetch=45 ... messages_in=678",
// the cumulative Count of kafka.network RequestMetrics RequestsPerSec per request type
// (summed over versions) and of BrokerTopicMetrics MessagesInPerSec (all topics).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.Map;
import java.util.TreeMap;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

public class KafkaRequests {
    public static void main(String[] args) throws Exception {
        JMXServiceURL url = new JMXServiceURL("service:jmx:rmi:///jndi/rmi://" + args[0] + "/jmxrmi");
        try (JMXConnector connector = JMXConnectorFactory.connect(url)) {
            MBeanServerConnection mbs = connector.getMBeanServerConnection();
            ObjectName requests = new ObjectName("kafka.network:type=RequestMetrics,name=RequestsPerSec,*");
            ObjectName messagesIn = new ObjectName("kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec");
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
            System.out.println("ready");
            System.out.flush();
            while (in.readLine() != null) {
                Map<String, Long> counts = new TreeMap<>();
                for (ObjectName name : mbs.queryNames(requests, null)) {
                    long count = ((Number) mbs.getAttribute(name, "Count")).longValue();
                    counts.merge(name.getKeyProperty("request"), count, Long::sum);
                }
                counts.put("messages_in", ((Number) mbs.getAttribute(messagesIn, "Count")).longValue());
                StringBuilder line = new StringBuilder();
                for (Map.Entry<String, Long> e : counts.entrySet()) {
                    line.append(e.getKey()).append('=').append(e.getValue()).append(' ');
                }
                System.out.println(line.toString().trim());
                System.out.flush();
            }
        }
    }
}
