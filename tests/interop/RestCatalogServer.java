// An Iceberg REST catalog server for the interop tests: Java Iceberg 1.10's own server-side handlers
// (org.apache.iceberg.rest.CatalogHandlers: requirement checks, metadata updates, metadata JSON written by
// Java) over a HadoopCatalog on a warehouse directory. The tests give it the warehouse of Spark's Hadoop
// catalog: the same tables, committed to by Spark directly and by PyIceberg through this server (Hadoop
// tables commit by an atomic rename of the next vN.metadata.json, so both JVMs see every commit).
// Served with the JDK's com.sun.net.httpserver on 127.0.0.1 only.
//
// Compiled at test time by tests/interop/rest_catalog.py against the Iceberg runtime jar. It lives in
// package org.apache.iceberg.rest for the package-private RESTObjectMapper (Java's REST JSON, the same
// serializers as Java's RESTCatalog client). Usage: java RestCatalogServer WAREHOUSE_URI; prints
// "LISTENING <port>" once it serves, and exits when its standard input closes.
package org.apache.iceberg.rest;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.Executors;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.exceptions.AlreadyExistsException;
import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.exceptions.NamespaceNotEmptyException;
import org.apache.iceberg.exceptions.NoSuchNamespaceException;
import org.apache.iceberg.exceptions.NoSuchTableException;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.hadoop.HadoopCatalog;
import org.apache.iceberg.rest.requests.CreateNamespaceRequest;
import org.apache.iceberg.rest.requests.CreateTableRequest;
import org.apache.iceberg.rest.requests.RegisterTableRequest;
import org.apache.iceberg.rest.requests.RenameTableRequest;
import org.apache.iceberg.rest.requests.UpdateNamespacePropertiesRequest;
import org.apache.iceberg.rest.requests.UpdateTableRequest;
import org.apache.iceberg.rest.responses.ConfigResponse;
import org.apache.iceberg.rest.responses.ErrorResponse;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;

public class RestCatalogServer {
  private static final ObjectMapper MAPPER = RESTObjectMapper.mapper();

  private final HadoopCatalog catalog;

  RestCatalogServer(String warehouse) {
    catalog = new HadoopCatalog(new Configuration(), warehouse);
  }

  public static void main(String[] args) throws Exception {
    RestCatalogServer server = new RestCatalogServer(args[0]);
    HttpServer http = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
    http.createContext("/v1/", server::handle);
    http.setExecutor(Executors.newFixedThreadPool(4));
    http.start();
    System.out.println("LISTENING " + http.getAddress().getPort());
    System.out.flush();
    InputStream stdin = System.in;
    while (stdin.read() >= 0) {
      // the test process holds our stdin open while it needs us
    }
    http.stop(0);
    System.exit(0);
  }

  private void handle(HttpExchange exchange) throws IOException {
    int status;
    Object response;
    try {
      String body = new String(exchange.getRequestBody().readAllBytes(), StandardCharsets.UTF_8);
      // still URL-encoded: decodeNamespace splits on the encoded separator, then decodes
      String[] path = exchange.getRequestURI().getRawPath().substring("/v1/".length()).split("/");
      response = route(exchange.getRequestMethod(), path, exchange.getRequestURI().getRawQuery(), body);
      status = response == null ? 204 : 200;
    } catch (Exception e) {
      status = statusOf(e);
      response =
          ErrorResponse.builder()
              .responseCode(status)
              .withType(e.getClass().getSimpleName())
              .withMessage(String.valueOf(e.getMessage()))
              .build();
    }
    byte[] bytes = response == null ? new byte[0] : MAPPER.writeValueAsBytes(response);
    exchange.getResponseHeaders().set("Content-Type", "application/json");
    boolean noBody = bytes.length == 0 || "HEAD".equals(exchange.getRequestMethod());
    exchange.sendResponseHeaders(status, noBody ? -1 : bytes.length);
    if (!noBody) {
      try (OutputStream out = exchange.getResponseBody()) {
        out.write(bytes);
      }
    }
    exchange.close();
  }

  private static int statusOf(Exception e) {
    if (e instanceof NoSuchTableException || e instanceof NoSuchNamespaceException) {
      return 404;
    }
    if (e instanceof AlreadyExistsException
        || e instanceof CommitFailedException
        || e instanceof NamespaceNotEmptyException) {
      return 409;
    }
    if (e instanceof IllegalArgumentException || e instanceof ValidationException) {
      return 400;
    }
    if (e instanceof UnsupportedOperationException) {
      return 406;
    }
    return 500; // CommitStateUnknownException too: PyIceberg reads 500 as an unknown commit state
  }

  private Object route(String method, String[] path, String query, String body) throws IOException {
    String route = method + " " + String.join("/", shape(path));
    switch (route) {
      case "GET config":
        return ConfigResponse.builder().build();
      case "GET namespaces":
        return CatalogHandlers.listNamespaces(catalog, parent(query));
      case "POST namespaces":
        return CatalogHandlers.createNamespace(catalog, read(body, CreateNamespaceRequest.class));
      case "GET namespaces/*":
        return CatalogHandlers.loadNamespace(catalog, namespace(path));
      case "HEAD namespaces/*":
        CatalogHandlers.namespaceExists(catalog, namespace(path));
        return null;
      case "DELETE namespaces/*":
        CatalogHandlers.dropNamespace(catalog, namespace(path));
        return null;
      case "POST namespaces/*/properties":
        return CatalogHandlers.updateNamespaceProperties(
            catalog, namespace(path), read(body, UpdateNamespacePropertiesRequest.class));
      case "GET namespaces/*/tables":
        return CatalogHandlers.listTables(catalog, namespace(path));
      case "POST namespaces/*/tables":
        return createTable(namespace(path), read(body, CreateTableRequest.class));
      case "POST namespaces/*/register":
        return CatalogHandlers.registerTable(
            catalog, namespace(path), read(body, RegisterTableRequest.class));
      case "GET namespaces/*/tables/*":
        return CatalogHandlers.loadTable(catalog, table(path));
      case "HEAD namespaces/*/tables/*":
        CatalogHandlers.tableExists(catalog, table(path));
        return null;
      case "POST namespaces/*/tables/*":
        return CatalogHandlers.updateTable(catalog, table(path), read(body, UpdateTableRequest.class));
      case "DELETE namespaces/*/tables/*":
        CatalogHandlers.dropTable(catalog, table(path));
        return null;
      case "POST tables/rename":
        CatalogHandlers.renameTable(catalog, read(body, RenameTableRequest.class));
        return null;
      default:
        throw new UnsupportedOperationException("not served by the test REST catalog: " + route);
    }
  }

  private Object createTable(Namespace namespace, CreateTableRequest request) {
    return request.stageCreate()
        ? CatalogHandlers.stageTableCreate(catalog, namespace, request)
        : CatalogHandlers.createTable(catalog, namespace, request);
  }

  // The route's shape: namespace and table names replaced by "*".
  private static String[] shape(String[] path) {
    String[] shape = path.clone();
    if (shape.length >= 2 && "namespaces".equals(shape[0])) {
      shape[1] = "*";
    }
    if (shape.length >= 4 && "tables".equals(shape[2])) {
      shape[3] = "*";
    }
    return shape;
  }

  private static Namespace namespace(String[] path) {
    return RESTUtil.decodeNamespace(path[1]);
  }

  private static TableIdentifier table(String[] path) {
    return TableIdentifier.of(namespace(path), RESTUtil.decodeString(path[3]));
  }

  private static Namespace parent(String query) {
    if (query != null) {
      for (String pair : query.split("&")) {
        if (pair.startsWith("parent=")) {
          return RESTUtil.decodeNamespace(RESTUtil.decodeString(pair.substring("parent=".length())));
        }
      }
    }
    return Namespace.empty();
  }

  private static <T> T read(String body, Class<T> type) throws IOException {
    return MAPPER.readValue(body, type);
  }
}
